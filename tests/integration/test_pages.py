"""The pages a browser meets, in real headless Chromium: the interactive docs at /docs/ (its "Try it
out" against the fake vendor, and as shipped, with the body it fills in, against the embedded model), and a page of another origin calling /v5/completions with fetch,
streams included, and the admin API's PUT and DELETE, allowed or not by GATEWAY_CORS_ORIGINS.

Tests name the databases and gateways they use before `page`: Playwright's browser runs an event
loop in this thread, and provisioning a database (the gateway's CLI, asyncio.run) must come first."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.browser import screenshot
from tests.support.cli import console_script, fresh_account
from tests.support.environments import SHARED_TLS, gateway_env
from tests.support.fakes.server import ServerThread
from tests.support.gateway_process import GatewayProcess

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>another origin</title></head>
<body style="font-family: sans-serif">
<h1>A page of another origin</h1>
<p>It calls the gateway at <code id="gateway"></code> with fetch.</p>
<pre id="out" style="white-space: pre-wrap; border: 1px solid #999; padding: 8px"></pre>
<script>
const show = (line) => { document.getElementById("out").textContent += line + "\\n"; };
window.complete = async (gateway, key, body) => {
  document.getElementById("gateway").textContent = gateway;
  try {
    const r = await fetch(gateway + "/v5/completions", {method: "POST", body: JSON.stringify(body),
      headers: {"content-type": "application/json", "x-api-key": key, "x-selected-account-id": "acct-a"}});
    if (!body.stream) {
      const answer = await r.json();
      show(`${r.status} ${JSON.stringify(answer)}`);
      return {status: r.status, answer, requestId: r.headers.get("x-request-id"),
              servedBy: r.headers.get("x-gateway-model")};
    }
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let text = "", reads = 0;
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      reads += 1;
      text += decoder.decode(value, {stream: true});
      if (reads === 1) { window.firstPiece = text; show("first piece: " + text.trim()); }
    }
    show(`${r.status} stream of ${reads} reads, ending ${JSON.stringify(text.slice(-30))}`);
    return {status: r.status, text, reads, model: r.headers.get("x-gateway-model")};
  } catch (error) {
    show("refused: " + error);
    return {error: String(error)};
  }
};
window.call = async (url, method, key, body) => {  // an admin call of another method than GET and POST
  document.getElementById("gateway").textContent = new URL(url).origin;
  try {
    const r = await fetch(url, {method, body: body === undefined ? undefined : JSON.stringify(body),
      headers: {"content-type": "application/json", "x-api-key": key}});
    const answer = await r.json();
    show(`${method} ${new URL(url).pathname}: ${r.status} ${JSON.stringify(answer)}`);
    return {status: r.status, answer};
  } catch (error) {
    show(`${method} refused: ${error}`);
    return {error: String(error)};
  }
};
</script></body></html>"""


async def page_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": PAGE.encode()})


@pytest.fixture(scope="module")
def origins():
    """Two pages of other origins (other loopback ports): the first is allowed, the second not."""
    with ServerThread(page_app) as allowed, ServerThread(page_app) as refused:
        yield allowed.url, refused.url


@pytest.fixture(scope="module")
def cors_gateway(upstream, database, origins):
    allowed, _ = origins
    with GatewayProcess(gateway_env(upstream.url, database.url, GATEWAY_CORS_ORIGINS=allowed)) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def admin_keys(database):
    """(an admin key, the id of a key it may change and revoke), made by the CLI in a process of its
    own: the browser's event loop may run in this thread already."""
    account = fresh_account()
    assert console_script(database.url, "accounts", "create", account).returncode == 0
    made = [json.loads(console_script(database.url, "keys", "create", "--account", account, *scopes,
                                      "--format", "json").stdout) for scopes in (("--scope", "admin"), ())]
    return made[0]["key"], made[1]["id"]


def contract_methods() -> set[str]:
    with open("openapi.json", "rb") as contract:
        paths = json.load(contract)["paths"].values()
    return {method.upper() for path in paths for method, operation in path.items() if isinstance(operation, dict)}


def test_a_page_of_an_allowed_origin_calls_and_streams(database, upstream, cors_gateway, origins, page):
    allowed, _ = origins
    page.goto(allowed)
    result = page.evaluate("([g, k]) => complete(g, k, {model: 'fake/cors', prompt: 'hi', max_tokens: 3})",
                           [cors_gateway.url, database.key])
    assert result["status"] == 200 and result["answer"]["choices"][0]["text"] == " w0 w1 w2"
    assert result["requestId"].startswith("cmpl-")  # headers of the contract the page can read
    assert result["servedBy"] == "fake/cors"

    # A stream the vendor holds after its first chunk: the page reads that chunk before the rest exists.
    page.evaluate("([g, k]) => { window.streamed = complete(g, k, {model: 'fake/held', prompt: 'hi', max_tokens: 4, "
                  "stream: true}); }", [cors_gateway.url, database.key])
    page.wait_for_function("window.firstPiece !== undefined")
    assert "data: {" in page.evaluate("window.firstPiece") and upstream.holding == 1
    upstream.release_held()
    streamed = page.evaluate("window.streamed")
    assert streamed["status"] == 200 and streamed["reads"] >= 2 and "data: [DONE]" in streamed["text"]
    assert streamed["model"] == "fake/held"
    screenshot(page, "cors-allowed-origin")


def test_a_page_of_any_other_origin_gets_no_grant(database, upstream, cors_gateway, origins, page):
    _, refused = origins
    page.goto(refused)
    before = len(upstream.requests)
    result = page.evaluate("([g, k]) => complete(g, k, {model: 'fake/cors', prompt: 'hi', max_tokens: 3})",
                           [cors_gateway.url, database.key])
    assert "Failed to fetch" in result["error"]
    assert len(upstream.requests) == before  # the preflight was refused: the request itself never went
    screenshot(page, "cors-refused-origin")


def test_preflights_grant_the_headers_clients_send_only_to_allowed_origins(cors_gateway, origins):
    allowed, refused = origins
    ask = {"access-control-request-method": "POST",
           "access-control-request-headers": "x-api-key, x-selected-account-id, authorization, content-type"}
    granted = httpx.options(f"{cors_gateway.url}/v5/completions", headers={"origin": allowed, **ask}, verify=SHARED_TLS)
    assert granted.status_code == 200 and granted.headers["access-control-allow-origin"] == allowed
    assert {h.strip() for h in granted.headers["access-control-allow-headers"].split(",")} >= {
        "x-api-key", "x-selected-account-id", "authorization", "content-type"}
    denied = httpx.options(f"{cors_gateway.url}/v5/completions", headers={"origin": refused, **ask}, verify=SHARED_TLS)
    assert "access-control-allow-origin" not in denied.headers
    # an error answer carries the grant too, so the page can read why it failed
    unauthorized = httpx.post(f"{cors_gateway.url}/v5/completions", json={}, headers={"origin": allowed},
                              verify=SHARED_TLS)
    assert unauthorized.status_code == 401 and unauthorized.headers["access-control-allow-origin"] == allowed


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_preflights_grant_every_method_of_the_contract(cors_gateway, origins, method):
    allowed, _ = origins
    granted = httpx.options(f"{cors_gateway.url}/v5/admin/limits/keys/key_0", verify=SHARED_TLS, headers={
        "origin": allowed, "access-control-request-method": method,
        "access-control-request-headers": "x-api-key, content-type"})
    assert granted.status_code == 200 and granted.headers["access-control-allow-origin"] == allowed, granted.text
    assert {m.strip() for m in granted.headers["access-control-allow-methods"].split(",")} == contract_methods()
    assert contract_methods() >= {"GET", "POST", "PUT", "DELETE"}


def test_a_page_of_an_allowed_origin_sets_limits_and_revokes_a_key(cors_gateway, origins, admin_keys, page):
    allowed, _ = origins
    admin_key, key_id = admin_keys
    page.goto(allowed)
    limits = page.evaluate("([url, key]) => call(url, 'PUT', key, {rpm: 7})",
                           [f"{cors_gateway.url}/v5/admin/limits/keys/{key_id}", admin_key])
    assert limits.get("status") == 200 and limits["answer"]["limits"]["rpm"] == 7, limits
    revoked = page.evaluate("([url, key]) => call(url, 'DELETE', key)", [f"{cors_gateway.url}/v5/admin/keys/{key_id}",
                                                                        admin_key])
    assert revoked.get("status") == 200 and revoked["answer"]["state"] == "revoked", revoked
    screenshot(page, "cors-put-delete")


def test_without_cors_origins_no_origin_is_granted(gateway, origins):
    allowed, _ = origins
    response = httpx.options(f"{gateway.url}/v5/completions", headers={
        "origin": allowed, "access-control-request-method": "POST"}, verify=SHARED_TLS)
    assert "access-control-allow-origin" not in response.headers


def test_the_contract_is_served(gateway):
    response = httpx.get(f"{gateway.url}/openapi.json", verify=SHARED_TLS)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    with open("openapi.json", "rb") as contract:
        assert response.json() == json.load(contract)


def test_the_docs_page_lists_every_operation_and_tries_a_completion(database, gateway, page):
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    refused: list[str] = []  # what the page's Content-Security-Policy blocked: nothing Swagger UI needs
    page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text
            else None)
    answer = page.goto(f"{gateway.url}/docs/")
    csp = answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp and "'unsafe-eval'" not in csp
    completions = page.locator(".opblock-post .opblock-summary").filter(has_text="/v5/completions")
    completions.wait_for()
    screenshot(page, "docs-page", full_page=False)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert {"/v5/completions", "/v5/usage", "/v5/vendors", "/healthz", "/readyz", "/metrics", "/openapi.json"} <= {
        p.strip().replace("\u200b", "") for p in paths}

    page.locator("button.authorize").first.click()
    dialog = page.locator(".modal-ux")
    dialog.locator("input").first.fill(database.key)  # the first scheme: APIKeyHeader (x-api-key)
    dialog.locator("button.authorize").first.click()
    dialog.locator("button.btn-done").first.click()

    completions.click()
    operation = page.locator(".opblock-post").filter(has_text="/v5/completions")
    operation.locator("button.try-out__btn").click()
    operation.locator("textarea.body-param__text").fill(json.dumps(
        {"model": "fake/docs", "prompt": "Tried from the docs page", "max_tokens": 5}))
    operation.locator("button.execute").click()
    status = operation.locator(".live-responses-table tr.response td.response-col_status").first
    status.wait_for()
    assert status.inner_text().strip() == "200"
    assert " w0 w1 w2 w3 w4" in operation.locator(".live-responses-table .microlight").first.inner_text()
    screenshot(page, "docs-try-it-out")
    operation.locator(".live-responses-table").first.scroll_into_view_if_needed()
    screenshot(page, "docs-try-it-out-answer", full_page=False)
    outside = [url for url in requested if not url.startswith(gateway.url)]
    assert not outside, f"the page fetched from elsewhere: {outside}"
    assert not refused, refused


def test_the_docs_page_tries_a_completion_as_shipped_on_the_embedded_model(database, local_gateway, page):
    """A new user's first try: authorize, "Try it out", "Execute", changing nothing. The body the
    page fills in is the contract's first request example, and the embedded model answers it."""
    page.goto(f"{local_gateway.url}/docs/")
    completions = page.locator(".opblock-post .opblock-summary").filter(has_text="/v5/completions")
    completions.wait_for()
    page.locator("button.authorize").first.click()
    dialog = page.locator(".modal-ux")
    dialog.locator("input").first.fill(database.key)
    dialog.locator("button.authorize").first.click()
    dialog.locator("button.btn-done").first.click()

    completions.click()
    operation = page.locator(".opblock-post").filter(has_text="/v5/completions")
    operation.locator("button.try-out__btn").click()
    sent = json.loads(operation.locator("textarea.body-param__text").input_value())
    operation.locator("button.execute").click()
    status = operation.locator(".live-responses-table tr.response td.response-col_status").first
    status.wait_for()
    answer = operation.locator(".live-responses-table .microlight").first.inner_text()
    operation.locator(".live-responses-table").first.scroll_into_view_if_needed()
    screenshot(page, "docs-try-it-out-as-shipped", full_page=False)
    assert status.inner_text().strip() == "200", answer
    completion = json.loads(answer)
    assert completion["model"] == sent["model"] == "local/smollm2-135m" and completion["choices"][0]["text"]
