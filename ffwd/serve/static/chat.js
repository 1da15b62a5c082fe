// Send, stop, compare: one reply into the output, and the same request again with fill off.
import { $, el, fmt } from "./dom.js";
import { buildBody, renderHistory } from "./form.js";
import { numbers, renderStats } from "./numbers.js";
import { run } from "./request.js";
import { notice } from "./server.js";
import { state } from "./state.js";
import { hideTip, TokenView } from "./tokens.js";

let outputView = null;  // the view on #output: each reply's replaces the last one's

function busy(on) {
  $("reply").setAttribute("aria-busy", String(on));
  $("send").disabled = on;
  $("stop").disabled = !on;
  $("compare").disabled = on || !state.lastRun;
}

export async function send(event) {
  event.preventDefault();
  let built;
  try {
    built = buildBody();
  } catch (e) {
    notice(e.message);
    return;
  }
  notice("");
  hideTip();
  $("comparison").hidden = true;
  if (outputView) outputView.detach();
  const view = outputView = new TokenView($("output"));
  state.abort = new AbortController();
  busy(true);
  try {
    const result = await run(built.body, view, state.abort.signal);
    Object.assign(result, { view });
    state.lastBody = built.body;
    state.lastRun = result;
    renderStats(result, view);
    if (built.next) state.history.push(built.next);
    state.history.push(assistantMessage(result));
    renderHistory();
    $("message").value = "";
  } catch (e) {
    notice(e.name === "AbortError" ? "Stopped." : e.message);
  } finally {
    state.abort = null;
    busy(false);
  }
}

function assistantMessage(result) {
  const message = { role: "assistant", content: result.content || null };
  if (result.calls.length) {
    message.tool_calls = result.calls.map((c) => ({
      id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  }
  return message;
}

function side(title, result, view, asked) {
  const n = numbers(result);
  const rows = [["ids", n.ids], ["forwards", n.forwards], ["ids per forward", fmt(n.ids / Math.max(1, n.forwards), 2)],
    ["decode seconds", fmt(n.decode, 3)], ["decode tokens/s", fmt(n.ids / n.decode, 1)],
    ["seconds in all", fmt(n.seconds, 3)]];
  const table = el("table", {}, ...rows.map(([k, v]) => el("tr", {},
    el("th", { scope: "row", textContent: k }), el("td", { textContent: String(v) }))));
  const box = el("div", { className: "side" }, el("h3", { textContent: `${title}: fill ${n.fill}` }));
  if (asked && asked !== n.fill) {
    box.append(el("p", { className: "note muted", textContent: `Asked for fill ${asked}; the server ` +
      `ran ${n.fill} (a forced tool call always goes through the strict rows).` }));
  }
  box.append(table, view.el);
  return box;
}

function verdict(a, b, body) {
  const ids = (r) => r.view.items.map((item) => item.token.id);
  const [x, y] = [ids(a), ids(b)];
  let at = 0;
  while (at < x.length && at < y.length && x[at] === y[at]) at += 1;
  const same = at === x.length && at === y.length;
  const [na, nb] = [numbers(a), numbers(b)];
  const speed = (na.ids / na.decode) / Math.max(1e-9, nb.ids / nb.decode);
  const text = same
    ? `Identical: the same ${x.length} ids with fill ${na.fill} and with fill ${nb.fill}, ` +
      `in ${na.forwards} forwards instead of ${nb.forwards}; decode ${fmt(speed, 2)}\u00d7 as fast.`
    : `The outputs part at id ${at + 1}` + (body.temperature > 0
      ? " (temperature > 0: each run samples; identity holds for greedy requests)."
      : " (greedy: a near tie rounded apart by a different forward shape; see README).");
  return el("p", { className: `verdict ${same ? "same" : "differs"}`, role: "status", textContent: text });
}

export async function compare() {
  if (!state.lastRun) return;
  const body = JSON.parse(JSON.stringify(state.lastBody));
  body.ffwd = { ...body.ffwd, fill: "off" };
  const box = $("comparison");
  const offView = new TokenView(el("div", { className: "output" }));
  const again = new TokenView(el("div", { className: "output" }));
  const before = state.lastRun;
  again.add(before.view.items.map((i) => i.token), before.view.items.map((i) => i.logprob));
  again.finish(before.calls);
  box.replaceChildren(el("p", { className: "muted", textContent: "Running the same request with fill off\u2026" }));
  box.hidden = false;
  state.abort = new AbortController();
  busy(true);
  try {
    const off = await run(body, offView, state.abort.signal);
    Object.assign(off, { view: offView });
    box.replaceChildren(verdict(before, off, body),
      side("this reply", { ...before, view: again }, again),
      side("again, fill off", off, offView, "off"));
  } catch (e) {
    box.replaceChildren(el("p", { className: "verdict differs", textContent: e.name === "AbortError" ? "Stopped." : e.message }));
  } finally {
    state.abort = null;
    busy(false);
  }
}
