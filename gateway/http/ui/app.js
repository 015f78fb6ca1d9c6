// The usage dashboard. Everything it shows comes from the gateway's API (GET /v5/accounts,
// GET /v5/usage), called with the key the person signed in with (common.js: the key lives in this
// tab's sessionStorage only, and is sent nowhere but this gateway). Keys are shown by their names.
// Text from the API (model names, users: a client writes them) is only ever set as textContent.
"use strict";

const NANOS_PER_USD = 1e9;
const SVG = "http://www.w3.org/2000/svg";
const BREAKDOWNS = [["by-model", "model", "Model"], ["by-endpoint", "endpoint", "Endpoint"], ["by-key", "key", "Key"],
                    ["by-user", "user", "User"], ["by-outcome", "outcome", "Outcome"]];

let signedIn = null; // {key, keyId, accounts, keyNames}
let generation = 0; // the latest refresh; answers to older ones are dropped

// -- figures ------------------------------------------------------------------------------------
function nanosOf(costUsd) {
  return costUsd === null ? 0 : Math.round(costUsd * NANOS_PER_USD); // exact below nine million dollars
}

function formatTokens(count) {
  return count.toLocaleString("en-US");
}

// Dollars from integer nano-dollars, exactly: at least two decimals, no trailing zeros beyond them.
function formatUsd(nanos) {
  const whole = Math.floor(nanos / NANOS_PER_USD);
  let fraction = String(nanos % NANOS_PER_USD).padStart(9, "0").replace(/0+$/, "");
  if (fraction.length < 2) fraction = fraction.padEnd(2, "0");
  return "$" + whole.toLocaleString("en-US") + "." + fraction;
}

// "unpriced" only when there are requests and none of them is priced: no requests cost nothing.
function formatCost(total) {
  return total.requests === 0 || total.requests > total.unpriced ? formatUsd(total.nanos) : "unpriced";
}

function emptyTotal() {
  return { requests: 0, refused: 0, prompt: 0, completion: 0, tokens: 0, nanos: 0, unpriced: 0, hits: 0, saved: 0 };
}

function addLine(total, line) {
  total.requests += line.requests;
  total.refused += line.refused_requests;
  total.prompt += line.prompt_tokens;
  total.completion += line.completion_tokens;
  total.tokens += line.total_tokens;
  total.nanos += nanosOf(line.cost_usd);
  total.unpriced += line.unpriced_requests;
  total.hits += line.cache_hits; // answered from the response cache (docs/cache.md)
  total.saved += nanosOf(line.cache_saved_usd);
}

// Lines are per account too: summed here per value of `field` (over every account shown).
function sumBy(lines, field) {
  const totals = new Map();
  for (const line of lines) {
    const value = field === null ? "" : line[field];
    if (!totals.has(value)) totals.set(value, emptyTotal());
    addLine(totals.get(value), line);
  }
  return totals;
}

// -- dates (UTC days) ---------------------------------------------------------------------------
function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

function addDays(day, days) {
  const date = new Date(day + "T00:00:00Z");
  date.setUTCDate(date.getUTCDate() + days);
  return isoDay(date);
}

function daysBetween(from, to) {
  const days = [];
  for (let day = from; day <= to && days.length < 3660; day = addDays(day, 1)) days.push(day);
  return days;
}

function setPeriod(from, to) {
  $("from").value = from;
  $("to").value = to;
}

// -- rendering ----------------------------------------------------------------------------------
function svg(name, attributes = {}, text = null) {
  const element = document.createElementNS(SVG, name);
  for (const [attribute, value] of Object.entries(attributes)) element.setAttribute(attribute, String(value));
  if (text !== null) element.textContent = text;
  return element;
}

function renderChart(perDay, from, to) {
  const days = daysBetween(from, to);
  const width = 1000, height = 260, left = 70, right = 80, top = 12, bottom = 28;
  const plotWidth = width - left - right, plotHeight = height - top - bottom;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": "Tokens and cost per day" });
  const totals = days.map((day) => perDay.get(day) || emptyTotal());
  const maxTokens = Math.max(0, ...totals.map((t) => t.tokens));
  const maxNanos = Math.max(0, ...totals.map((t) => t.nanos));
  for (const fraction of [0, 0.5, 1]) {
    const y = top + plotHeight * (1 - fraction);
    chart.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y, y2: y }));
    chart.append(svg("text", { class: "axis", x: left - 6, y: y + 4, "text-anchor": "end" },
                     formatTokens(Math.round(maxTokens * fraction))));
    chart.append(svg("text", { class: "axis", x: width - right + 6, y: y + 4 },
                     formatUsd(Math.round(maxNanos * fraction))));
  }
  if (maxTokens === 0 && maxNanos === 0) {
    chart.append(svg("text", { class: "empty", x: left + plotWidth / 2, y: top + plotHeight / 2,
                               "text-anchor": "middle" }, "No requests in this period"));
  }
  const step = plotWidth / Math.max(days.length, 1);
  const labelEvery = Math.max(1, Math.ceil(days.length / 12));
  const points = [];
  days.forEach((day, i) => {
    const total = totals[i];
    const x = left + i * step;
    const barHeight = maxTokens ? (total.tokens / maxTokens) * plotHeight : 0;
    const bar = svg("rect", { class: "bar", x: x + step * 0.15, width: Math.max(step * 0.7, 1),
                              y: top + plotHeight - barHeight, height: barHeight, "data-day": day });
    bar.append(svg("title", {}, `${day}: ${formatTokens(total.tokens)} tokens, ${formatCost(total)}`));
    chart.append(bar);
    const costY = top + plotHeight - (maxNanos ? (total.nanos / maxNanos) * plotHeight : 0);
    points.push(`${x + step / 2},${costY}`);
    if (total.nanos) chart.append(svg("circle", { class: "cost-dot", cx: x + step / 2, cy: costY, r: 3 }));
    if (i % labelEvery === 0) {
      chart.append(svg("text", { class: "axis", x: x + step / 2, y: height - 8, "text-anchor": "middle" },
                       day.slice(5)));
    }
  });
  chart.append(svg("polyline", { class: "cost-line", points: points.join(" ") }));
  $("chart").replaceChildren(chart);
}

// A key by its name ("ci bot (key_…)"), as GET /v5/accounts names the keys of the accounts shown.
function label(table, value) {
  if (table.dataset.dimension !== "key_id") return value;
  const name = signedIn && signedIn.keyNames.get(value);
  return name ? `${name} (${value})` : value;
}

function renderTable(table, title, totals) {
  const head = document.createElement("tr");
  for (const name of [title, "Requests", "Refused", "Prompt tokens", "Completion tokens", "Total tokens",
                      "Cost (USD)", "Unpriced"]) {
    head.append(cell("th", name));
  }
  const rows = [...totals.entries()].sort((a, b) => b[1].tokens - a[1].tokens || String(a[0]).localeCompare(b[0]));
  const body = rows.map(([value, total]) => {
    const row = document.createElement("tr");
    row.append(value === null ? cell("td", "(no user)", "none") : cell("td", label(table, value)));
    for (const figure of [total.requests, total.refused, total.prompt, total.completion, total.tokens]) {
      row.append(cell("td", formatTokens(figure)));
    }
    row.append(cell("td", formatCost(total)), cell("td", formatTokens(total.unpriced)));
    return row;
  });
  if (body.length === 0) {
    const row = document.createElement("tr");
    const none = cell("td", "No requests in this period", "none");
    none.colSpan = 8;
    row.append(none);
    body.push(row);
  }
  table.replaceChildren(head, ...body);
}

function renderTotals(total) {
  const shown = { requests: formatTokens(total.requests), refused_requests: formatTokens(total.refused),
                  total_tokens: formatTokens(total.tokens),
                  cost: formatCost(total), unpriced_requests: formatTokens(total.unpriced),
                  cache_hits: formatTokens(total.hits), cache_saved: formatUsd(total.saved) };
  for (const element of document.querySelectorAll("[data-total]")) element.textContent = shown[element.dataset.total];
}

// -- the flow -----------------------------------------------------------------------------------
async function refresh() {
  if (!signedIn) return;
  const mine = ++generation;
  const from = $("from").value, to = $("to").value;
  if (!from || !to || from > to) {
    showError("error", "Choose a period: From on or before To.");
    return;
  }
  document.body.dataset.state = "loading";
  const params = { start: from + "T00:00:00Z", end: addDays(to, 1) + "T00:00:00Z" };
  const account = $("account").value;
  try {
    const [days, ...breakdowns] = await Promise.all(["day", ...BREAKDOWNS.map((b) => b[1])].map(
      (group) => api(signedIn.key, "/v5/usage", { ...params, group_by: group }, account)));
    if (mine !== generation) return;
    showError("error", "");
    const perDay = sumBy(days.data, "day");
    renderChart(perDay, from, to);
    BREAKDOWNS.forEach(([id, , title], i) => {
      renderTable($(id), title, sumBy(breakdowns[i].data, $(id).dataset.dimension));
    });
    renderTotals(sumBy(days.data, null).get("") || emptyTotal());
    document.body.dataset.state = "ready";
    document.body.dataset.generation = String(mine); // which refresh the page shows (tests wait on it)
  } catch (error) {
    if (mine !== generation) return;
    if (error instanceof ApiError && error.status === 401) {
      signOut("The key is no longer valid: sign in again.");
      return;
    }
    showError("error", `Could not load usage: ${error.message}`);
    document.body.dataset.state = "error";
  }
}

function showAccounts(accounts) {
  const select = $("account");
  const options = accounts.map((account) => {
    const option = document.createElement("option");
    option.value = account.id;
    option.textContent = account.name ? `${account.id} — ${account.name}` : account.id;
    return option;
  });
  if (accounts.length > 1) {
    const all = document.createElement("option");
    all.value = "";
    all.textContent = `All ${accounts.length} accounts`;
    options.unshift(all);
  }
  select.replaceChildren(...options);
}

async function signIn(key) {
  const listed = await api(key, "/v5/accounts");
  signedIn = { key, keyId: listed.key_id, accounts: listed.data,
               keyNames: new Map(listed.keys.map((k) => [k.id, k.name])) };
  sessionStorage.setItem(STORAGE_KEY, key);
  $("key-id").textContent = listed.key_name ? `${listed.key_name} (${listed.key_id})` : listed.key_id;
  $("admin-link").hidden = !listed.scopes.includes("admin");
  showAccounts(listed.data);
  $("sign-in").hidden = true;
  $("who").hidden = false;
  $("dashboard").hidden = false;
  await refresh();
}

function signOut(message = "") {
  sessionStorage.removeItem(STORAGE_KEY);
  signedIn = null;
  generation++;
  $("dashboard").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  $("api-key").value = "";
  showError("sign-in-error", message);
  document.body.dataset.state = "signed-out";
}

function start() {
  const today = isoDay(new Date());
  setPeriod(addDays(today, -29), today);
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    showError("sign-in-error", "");
    try {
      await signIn($("api-key").value.trim());
    } catch (error) {
      if (error instanceof ApiError && error.code === "insufficient_scope") {
        sessionStorage.setItem(STORAGE_KEY, $("api-key").value.trim()); // an admin key without `usage`
        window.location.assign("admin.html");
        return;
      }
      signOut(error instanceof ApiError && error.status === 401 ? "That key is not valid." : error.message);
    }
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("controls").addEventListener("change", refresh);
  $("controls").addEventListener("submit", (event) => event.preventDefault());
  for (const button of document.querySelectorAll(".presets button")) {
    button.addEventListener("click", () => {
      const now = isoDay(new Date());
      if (button.dataset.month) setPeriod(now.slice(0, 8) + "01", now);
      else setPeriod(addDays(now, 1 - Number(button.dataset.days)), now);
      refresh();
    });
  }
  const saved = sessionStorage.getItem(STORAGE_KEY);
  if (saved) signIn(saved).catch(() => signOut("Sign in again."));
  else signOut();
}

document.addEventListener("DOMContentLoaded", start);
