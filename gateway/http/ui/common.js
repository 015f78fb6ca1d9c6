// What the dashboard (app.js) and the keys page (admin.js) share: the API call, with the key the
// person signed in with (kept in this tab's sessionStorage only), and small DOM helpers. Text from
// the API is only ever set as textContent.
"use strict";

const STORAGE_KEY = "gateway.api_key";
const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(key, path, params = {}, account = "", method = "GET", body = undefined) {
  const headers = { "x-api-key": key };
  if (account) headers["x-selected-account-id"] = account;
  if (body !== undefined) headers["content-type"] = "application/json";
  const query = new URLSearchParams(params).toString();
  const response = await fetch(path + (query ? "?" + query : ""), {
    method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    const error = answer && answer.error ? answer.error : {};
    throw new ApiError(response.status, error.message || `HTTP ${response.status}`, error.code || null);
  }
  return answer;
}

function cell(tag, text, className = "") {
  const element = document.createElement(tag);
  element.textContent = text;
  if (className) element.className = className;
  return element;
}

function showError(id, message) {
  const element = $(id);
  element.textContent = message;
  element.hidden = !message;
}
