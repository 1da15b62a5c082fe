// The server: the API key, its errors, requests.
import { $ } from "./dom.js";
import { state } from "./state.js";

export const KEY_STORE = "ffwd-api-key";

export function apiKey() { return sessionStorage.getItem(KEY_STORE) || ""; }

export async function api(path, init) {
  const headers = new Headers((init && init.headers) || {});
  if (apiKey()) headers.set("Authorization", "Bearer " + apiKey());
  const res = await fetch(path, { ...init, headers });
  if (res.status === 401) needKey();
  return res;
}

function needKey() {
  state.keyNeeded = true;
  notice(apiKey()
    ? "The server refused this API key (401). Enter the key it was started with (--api-key)."
    : "This server asks for an API key (it was started with --api-key). Enter it above: " +
      "the page keeps it in this tab only.");
  $("api-key").focus();
}

export function notice(text) {
  const box = $("notice");
  box.textContent = text;
  box.hidden = !text;
}

export async function errorText(res) {
  try {
    const body = await res.json();
    const err = body.error || {};
    return `${res.status}: ${err.message || JSON.stringify(body)}${err.param ? ` (${err.param})` : ""}`;
  } catch (e) {
    return `${res.status} ${res.statusText}`;
  }
}

export async function loadModel() {
  const res = await api("/v1/models");
  if (!res.ok) {
    $("model").textContent = res.status === 401 ? "needs an API key" : await errorText(res);
    return;
  }
  state.keyNeeded = false;
  const body = await res.json();
  const id = body.data && body.data[0] ? body.data[0].id : "?";
  $("model").textContent = `serving ${id}`;
}
