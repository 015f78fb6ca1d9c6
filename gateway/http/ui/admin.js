// The keys page: create, rotate and revoke keys and set their limits, for a key with the `admin`
// scope, through the gateway's /v5/admin/ operations (common.js: the key the person signed in
// with lives in this tab's sessionStorage only). A new key is shown once, to be copied.
"use strict";

const LIMITS = ["rpm", "tpm", "concurrent", "budget_tokens", "budget_usd"];
let key = null;
let generation = 0;

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
  showError("error", "");
  ready();
}

async function act(work) {
  try {
    await work();
    await load();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return signOut("The key is no longer valid: sign in again.");
    showError("error", error.message);
    document.body.dataset.state = "error";
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
    const value = Array.isArray(use.value) ? use.value.join(" ") : String(use.value);
    for (const text of [use.limit, value, use.used ?? "", use.remaining ?? "", use.source]) row.append(cell("td", String(text)));
    return row;
  });
  $("limits").replaceChildren(head, ...rows);
}

async function setLimits(event) {
  event.preventDefault();
  const body = {};
  for (const name of LIMITS) {
    const text = $(`limit-${name}`).value;
    body[name] = text === "" ? null : Number(text);
  }
  const hasBudget = body.budget_tokens !== null || body.budget_usd !== null;
  body.period = hasBudget ? ($("limit-period").value || "month") : null;
  const id = $("limits-key").value;
  await act(async () => showLimits(await admin(`/v5/admin/limits/keys/${encodeURIComponent(id)}`, "PUT", body)));
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
