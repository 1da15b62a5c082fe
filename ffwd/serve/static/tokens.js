// Tokens on the page: one span per output id, coloured by its origin, with a tip.
import { $, el, fmt } from "./dom.js";

export const ORIGINS = {
  sampled: "sampled by the model, one forward per id",
  template: "chat template markup (strict row), appended without sampling",
  schema: "tool name or argument key from the request's tools (strict row)",
  grammar: "forced by the request's grammar, appended without sampling",
  echo: "copied from the context and kept where the model agreed",
  recall: "copied from an earlier request's output (same API key) and kept where the model agreed",
  ngram: "proposed by an n-gram source and verified",
  mtp: "proposed by a multi-token head and verified",
};

export class TokenView {
  constructor(container) {
    this.el = container;
    this.el.textContent = "";
    this.items = [];
    this.pending = [];
    this.segments = [];
    this.calls = new Map();
    this.counts = {};
    this.listening = new AbortController();
    const on = (type, handler) =>
      container.addEventListener(type, handler, { signal: this.listening.signal });
    on("keydown", (e) => this.key(e));
    on("mouseover", (e) => this.point(e.target));
    on("focusin", (e) => this.point(e.target));
    on("mouseout", hideTip);
    on("focusout", hideTip);
  }

  // Stop answering the container's events: a new view takes it over.
  detach() {
    this.listening.abort();
  }

  add(entries, logprobs) {
    entries.forEach((token, i) => {
      const span = this.span(token, logprobs ? logprobs[i] : null);
      if (!token.part) {
        this.pending.push(span);
        return;
      }
      this.segment(token).body.append(...this.pending, span);
      this.pending = [];
    });
  }

  span(token, logprob) {
    const origin = token.origin in ORIGINS ? token.origin : "sampled";
    const span = el("span", { className: `tok o-${origin}`, tabIndex: this.items.length ? -1 : 0 });
    span.dataset.i = String(this.items.length);
    const text = token.text;
    if (text === "") span.append("\u2205");
    for (const [i, piece] of text.split("\n").entries()) {
      if (i > 0) span.append(el("span", { className: "nl", textContent: "\u21b5" }), "\n");
      if (piece) span.append(piece);
    }
    this.items.push({ token, logprob, span });
    this.counts[token.origin] = (this.counts[token.origin] || 0) + 1;
    return span;
  }

  segment(token) {
    const last = this.segments[this.segments.length - 1];
    if (token.part !== "call") {
      return last && last.kind === "content" ? last : this.open("content", el("div", { className: "segment" }));
    }
    if (!this.calls.has(token.call)) {
      const head = el("div", { className: "call-head" }, `call ${token.call + 1} \u00b7 `,
        el("code", { textContent: "\u2026" }));
      const box = el("div", { className: "call", role: "group" }, head);
      const seg = this.open("call", box, el("div", { className: "call-body" }));
      Object.assign(seg, { index: token.call, name: head.lastChild, args: null });
      this.calls.set(token.call, seg);
      box.setAttribute("aria-label", `tool call ${token.call + 1}`);
    }
    return this.calls.get(token.call);
  }

  open(kind, box, body) {
    if (body) box.append(body);
    this.el.append(box);
    const seg = { kind, box, body: body || box };
    this.segments.push(seg);
    return seg;
  }

  nameCall(index, name) {
    const seg = this.calls.get(index);
    if (seg && name) seg.name.textContent = name;
  }

  finish(calls) {
    if (this.pending.length) {
      const box = el("div", { className: "segment tail" }, el("div", {
        className: "tail-head",
        textContent: "after the reply: markup and text that did not come out as content or a call",
      }));
      this.open("tail", box, el("div")).body.append(...this.pending);
      this.pending = [];
    }
    calls.forEach((call, index) => {
      const seg = this.calls.get(index);
      if (!seg) return;
      seg.name.textContent = call.name;
      let args = call.arguments;
      try { args = JSON.stringify(JSON.parse(call.arguments), null, 1); } catch (e) { /* as sent */ }
      seg.box.append(el("pre", { className: "call-args", textContent: `arguments ${args}` }));
    });
    if (!this.items.length) this.el.append(el("p", { className: "muted", textContent: "(no tokens)" }));
  }

  key(e) {
    const at = Number(e.target.dataset && e.target.dataset.i);
    if (Number.isNaN(at)) return;
    const moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1, Home: -at, End: this.items.length };
    if (!(e.key in moves)) return;
    e.preventDefault();
    const next = Math.min(this.items.length - 1, Math.max(0, at + moves[e.key]));
    this.items[at].span.tabIndex = -1;
    this.items[next].span.tabIndex = 0;
    this.items[next].span.focus();
  }

  point(target) {
    const span = target.closest && target.closest(".tok");
    if (!span || !this.el.contains(span)) return;
    showTip(span, this.items[Number(span.dataset.i)]);
  }
}

function showTip(span, item) {
  const { token, logprob } = item;
  const tip = $("tip");
  const lp = token.logprob !== undefined ? token.logprob : logprob && logprob.logprob;
  const lines = [
    el("div", {}, el("b", { textContent: "text " }), el("code", { textContent: JSON.stringify(token.text) })),
    el("div", { textContent: `id ${token.id} \u00b7 origin ${token.origin}` }),
    el("div", { className: "alts", textContent: ORIGINS[token.origin] || "" }),
    el("div", {
      textContent: lp === undefined || lp === null ? "logprob: ask for log-probabilities"
        : `logprob ${fmt(lp, 3)} (p = ${fmt(100 * Math.exp(lp), 1)}%)`,
    }),
  ];
  const alts = logprob && logprob.top_logprobs ? logprob.top_logprobs : [];
  if (alts.length) {
    lines.push(el("div", { className: "alts", textContent: "best: " + alts
      .map((a) => `${JSON.stringify(a.token)} ${fmt(a.logprob, 2)}`).join(", ") }));
  }
  tip.replaceChildren(...lines);
  tip.hidden = false;
  const box = span.getBoundingClientRect();
  const left = Math.max(4, Math.min(box.left, window.innerWidth - tip.offsetWidth - 4));
  const below = box.bottom + 6 + tip.offsetHeight < window.innerHeight;
  tip.style.left = `${left}px`;
  tip.style.top = `${below ? box.bottom + 6 : box.top - tip.offsetHeight - 6}px`;
  $("token-info").textContent = lines.map((l) => l.textContent).join(" \u00b7 ");
}

export function hideTip() { $("tip").hidden = true; }
