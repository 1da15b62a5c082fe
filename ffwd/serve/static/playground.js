// ffwd playground: a chat against the server this page came from, every output token
// coloured by where it came from. Public API only: /v1/models, /v1/chat/completions with
// "ffwd": {"tokens": true}, and /metrics. No build step, no dependencies: ES modules,
// this one the entry, which wires the page's controls to the others.
import { compare, send } from "./chat.js";
import { $ } from "./dom.js";
import { SCHEMA, refreshToolChoice, renderHistory, useExample } from "./form.js";
import { draw, poll } from "./live.js";
import { renderLegend } from "./numbers.js";
import { KEY_STORE, apiKey, loadModel, notice } from "./server.js";
import { state } from "./state.js";

function start() {
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem(KEY_STORE, key); else sessionStorage.removeItem(KEY_STORE);
    $("api-key").value = "";
    $("api-key").placeholder = key ? "key set for this tab" : "only if the server has one";
    state.keyNeeded = false;
    notice("");
    loadModel();
    poll();
  });
  $("chat-form").addEventListener("submit", send);
  $("chat-form").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      $("chat-form").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.abort && state.abort.abort());
  $("compare").addEventListener("click", compare);
  $("new-chat").addEventListener("click", () => {
    state.history = [];
    renderHistory();
    $("message").focus();
  });
  $("example-weather").addEventListener("click", () => useExample("weather"));
  $("example-files").addEventListener("click", () => useExample("files"));
  $("tools-clear").addEventListener("click", () => useExample(null));
  $("tools").addEventListener("change", () => refreshToolChoice());
  $("response-format").addEventListener("change", () => {
    $("schema-box").hidden = $("response-format").value !== "json_schema";
  });
  $("schema").value = JSON.stringify(SCHEMA, null, 2);
  if (apiKey()) $("api-key").placeholder = "key set for this tab";
  useExample("weather");
  renderLegend({});
  window.addEventListener("resize", draw);
  draw();
  loadModel().then(poll);
  setInterval(poll, 2000);
}

start();
