// The keys page: create, rotate and revoke keys and set their limits, for a key with the `admin`
// scope, through the gateway's /v5/admin/ operations (common.js: the key the person signed in
// with lives in this tab's sessionStorage only). A new key is shown once, to be copied.
"use strict";

// Each field of the limits form, by the API's name: how a limit is shown in it, and how its text is
// sent (null removes the limit: PUT /v5/admin/limits/... sets the fields it is given, and only them).
const count = { show: (value) => (value === null ? "" : String(value)), send: (text) => (text === "" ? null : Number(text)) };
const LIMIT_FIELDS = {
  rpm: count, tpm: count, concurrent: count, budget_tokens: count, budget_usd: count,
  period: { show: (value) => value || "month", send: (text) => text }, // month: the gateway's default
  models: { show: (value) => (value ? value.join(" ") : ""), send: (text) => (text.trim() ? text.trim().split(/\s+/) : null) },
  cache: { show: (value) => (value === null ? "" : value ? "on" : "off"), send: (text) => (text === "" ? null : text === "on") },
};
const BUDGETS = ["budget_tokens", "budget_usd"];
let key = null;
let generation = 0;
let shown = null; // the limits the form was filled with, as the gateway answered them ({id, limits})

function ready() {
  document.body.dataset.state = "ready";
  document.body.dataset.generation = String(++generation); // tests wait on it
}

async function admin(path, method = "GET", body = undefined) {
  return api(key, path, {}, "", method, body);
}

function showNewKey(title, created) {
  $("new-key-title").textContent = `${title}: ${created.api_key.name} (${created.api_key.id})`;
  $("new-key-value").textContent = created.key;
  $("copied").textContent = "";
  $("new-key").hidden = false;
}

function keyRow(info) {
  const row = document.createElement("tr");
  const scopes = info.scopes.join(" ");
  const expires = info.expires_at ? info.expires_at.slice(0, 16).replace("T", " ") : "never";
  row.append(cell("td", info.name || "(no name)"), cell("td", info.id), cell("td", info.accounts.join(" ")),
             cell("td", scopes), cell("td", info.state, `state-${info.state}`), cell("td", expires));
  const actions = cell("td", "", "actions");
  if (info.state === "active") {
    const rotate = cell("button", "Rotate");
    rotate.type = "button";
    rotate.dataset.rotate = info.id;
    actions.append(rotate);
  }
  if (info.state === "active" || info.state === "rotating") {
    const revoke = cell("button", "Revoke");
    revoke.type = "button";
    revoke.dataset.revoke = info.id;
    actions.append(revoke);
  }
  row.append(actions);
  return row;
}

async function load() {
  const [keys, accounts] = await Promise.all([admin("/v5/admin/keys"), admin("/v5/admin/accounts")]);
  const head = document.createElement("tr");
  for (const name of ["Name", "Id", "Accounts", "Scopes", "State", "Expires (UTC)", ""]) head.append(cell("th", name));
  $("keys").replaceChildren(head, ...keys.data.slice().reverse().map(keyRow));
  const selected = new Set([...$("create-accounts").selectedOptions].map((o) => o.value));
  $("create-accounts").replaceChildren(...accounts.data.map((a) => {
    const option = cell("option", a.name ? `${a.id} — ${a.name}` : a.id);
    option.value = a.id;
    option.selected = selected.has(a.id);
    return option;
  }));
  const chosen = $("limits-key").value;
  $("limits-key").replaceChildren(...keys.data.filter((k) => k.state !== "revoked").map((k) => {
    const option = cell("option", k.name ? `${k.name} (${k.id})` : k.id);
    option.value = k.id;
    option.selected = k.id === chosen;
    return option;
  }));
  // The form keeps what is being typed into it unless another key is now chosen.
  if ($("limits-key").value !== (shown && shown.id)) await loadLimits($("limits-key").value);
  showError("error", "");
  ready();
}

function failed(error) {
  if (error instanceof ApiError && error.status === 401) return signOut("The key is no longer valid: sign in again.");
  showError("error", error.message);
  document.body.dataset.state = "error";
}

async function act(work) {
  try {
    await work();
    await load();
  } catch (error) {
    failed(error);
  }
}

async function create(event) {
  event.preventDefault();
  const body = {
    name: $("create-name").value.trim(),
    accounts: [...$("create-accounts").selectedOptions].map((o) => o.value),
    scopes: [...document.querySelectorAll("input[name=scope]:checked")].map((box) => box.value),
  };
  if ($("create-expires").value) body.expires_at = $("create-expires").value + "T00:00:00Z";
  const models = $("create-models").value.trim();
  if (models) body.models = models.split(/\s+/);
  // Made with the key, in its transaction: the key is never without it.
  if ($("create-rpm").value) body.limits = { rpm: Number($("create-rpm").value) };
  await act(async () => showNewKey("New key", await admin("/v5/admin/keys", "POST", body)));
}

async function clicked(event) {
  const button = event.target.closest("button");
  if (!button) return;
  if (button.dataset.rotate) {
    const grace = Number($("grace").value || 0);
    await act(async () => showNewKey("Rotated", await admin(
      `/v5/admin/keys/${encodeURIComponent(button.dataset.rotate)}/rotate`, "POST", { grace_seconds: grace })));
  } else if (button.dataset.revoke) {
    if (button.dataset.confirm !== "yes") { // a second click revokes: nothing is undone by mistake
      button.dataset.confirm = "yes";
      button.textContent = "Confirm revoke";
      return;
    }
    await act(() => admin(`/v5/admin/keys/${encodeURIComponent(button.dataset.revoke)}`, "DELETE"));
  }
}

function showLimits(answer) {
  const head = document.createElement("tr");
  for (const name of ["Limit", "Value", "Used", "Remaining", "Source"]) head.append(cell("th", name));
  const rows = answer.consumption.map((use) => {
    const row = document.createElement("tr");
    const value = Array.isArray(use.value) ? use.value.join(" ") : use.value === true ? "on"
      : use.value === false ? "off" : String(use.value);
    for (const text of [use.limit, value, use.used ?? "", use.remaining ?? "", use.source]) row.append(cell("td", String(text)));
    return row;
  });
  if (!rows.length) {
    const none = cell("td", "No limits of its own (its account's apply).", "none");
    none.colSpan = 5;
    rows.push(document.createElement("tr"));
    rows[0].append(none);
  }
  $("limits").replaceChildren(head, ...rows);
}

// The limits of key `id` into the form: the gateway's, never a blank form whose empty fields would
// read as "no limit".
async function loadLimits(id) {
  if (!id) return fillLimits(null);
  const answer = await admin(`/v5/admin/limits/keys/${encodeURIComponent(id)}`);
  if ($("limits-key").value === id) fillLimits(answer); // else another key was chosen meanwhile
}

function fillLimits(answer) {
  shown = answer && { id: answer.id, limits: answer.limits };
  for (const [name, field] of Object.entries(LIMIT_FIELDS)) {
    $(`limit-${name}`).value = answer ? field.show(answer.limits[name]) : "";
  }
  if (answer) showLimits(answer);
  else $("limits").replaceChildren();
  markChanges();
}

// What to send: the fields whose value differs from the one shown (a field emptied sends null, which
// removes that limit); the period only while a budget is left for it to be the period of.
function changes() {
  if (!shown) return {};
  const body = {};
  for (const [name, field] of Object.entries(LIMIT_FIELDS)) {
    const now = field.send($(`limit-${name}`).value);
    if (JSON.stringify(now) !== JSON.stringify(field.send(field.show(shown.limits[name])))) body[name] = now;
  }
  if (!BUDGETS.some((name) => (name in body ? body[name] : shown.limits[name]) !== null)) delete body.period;
  return body;
}

function markChanges() {
  const body = changes();
  for (const name of Object.keys(LIMIT_FIELDS)) $(`limit-${name}`).classList.toggle("changed", name in body);
  $("limits-form").querySelector("button[type=submit]").disabled = Object.keys(body).length === 0;
}

async function setLimits(event) {
  event.preventDefault();
  const body = changes();
  if (!shown || Object.keys(body).length === 0) return;
  const id = shown.id;
  await act(async () => fillLimits(await admin(`/v5/admin/limits/keys/${encodeURIComponent(id)}`, "PUT", body)));
}

async function chooseKey() {
  try {
    await loadLimits($("limits-key").value);
    showError("error", "");
    ready();
  } catch (error) {
    failed(error);
  }
}

async function signIn(candidate) {
  key = candidate;
  await admin("/v5/admin/keys"); // refused (403) without the admin scope
  sessionStorage.setItem(STORAGE_KEY, candidate);
  const listed = await api(candidate, "/v5/accounts").catch(() => null); // the key's name, if it may read it
  $("key-id").textContent = listed && listed.key_name ? `${listed.key_name} (${listed.key_id})` : "with admin scope";
  $("sign-in").hidden = true;
  $("who").hidden = false;
  $("admin").hidden = false;
  await load();
}

function signOut(message = "") {
  sessionStorage.removeItem(STORAGE_KEY);
  key = null;
  $("admin").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  $("new-key").hidden = true;
  $("api-key").value = "";
  fillLimits(null);
  showError("sign-in-error", message);
  document.body.dataset.state = "signed-out";
}

function start() {
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    showError("sign-in-error", "");
    try {
      await signIn($("api-key").value.trim());
    } catch (error) {
      signOut(error instanceof ApiError && error.status === 401 ? "That key is not valid." : error.message);
    }
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("create-form").addEventListener("submit", create);
  $("limits-form").addEventListener("submit", setLimits);
  $("limits-form").addEventListener("input", (event) => { if (event.target.id !== "limits-key") markChanges(); });
  $("limits-key").addEventListener("change", chooseKey);
  $("keys").addEventListener("click", clicked);
  $("dismiss-key").addEventListener("click", () => { $("new-key").hidden = true; $("new-key-value").textContent = ""; });
  $("copy-key").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText($("new-key-value").textContent);
      $("copied").textContent = "Copied.";
    } catch (error) { // no clipboard (an insecure origin): select it for the person to copy
      window.getSelection().selectAllChildren($("new-key-value"));
      $("copied").textContent = "Selected: copy it with your keyboard.";
    }
  });
  const saved = sessionStorage.getItem(STORAGE_KEY);
  if (saved) signIn(saved).catch((error) => signOut(error.message));
  else signOut();
}

document.addEventListener("DOMContentLoaded", start);
