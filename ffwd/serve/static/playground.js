// ffwd playground: a chat against the server this page came from, every output token
// coloured by where it came from. Public API only: /v1/models, /v1/chat/completions with
// "ffwd": {"tokens": true}, and /metrics. No build step, no dependencies.
"use strict";

(() => {
  const ORIGINS = {
    sampled: "sampled by the model, one forward per id",
    template: "chat template markup (strict row), appended without sampling",
    schema: "tool name or argument key from the request's tools (strict row)",
    grammar: "forced by the request's grammar, appended without sampling",
    echo: "copied from the context and kept where the model agreed",
    recall: "copied from an earlier request's output (same API key) and kept where the model agreed",
    ngram: "proposed by an n-gram source and verified",
    mtp: "proposed by a multi-token head and verified",
  };
  const ALWAYS_SHOWN = ["sampled", "template", "schema", "grammar", "echo"];
  const KEY_STORE = "ffwd-api-key";
  const EXAMPLES = {
    weather: {
      message: "What is the weather in Paris?",
      tools: [
        fn("get_weather", "Get the current weather for a city.", {
          city: { type: "string", description: "City name" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        }, ["city"]),
        fn("get_time", "Get the local time in a city.", { city: { type: "string" } }, ["city"]),
      ],
    },
    files: {
      message: "Read the file src/app/settings.toml from line 10.",
      tools: [
        fn("read_file", "Read a text file.", {
          path: { type: "string" }, start_line: { type: "integer" },
        }, ["path"]),
        fn("write_file", "Write text to a file.", {
          path: { type: "string" }, content: { type: "string" },
        }, ["path", "content"]),
      ],
    },
  };
  const SCHEMA = {
    type: "object",
    properties: { city: { type: "string", maxLength: 24 }, country: { type: "string", maxLength: 24 } },
    required: ["city", "country"],
  };

  const $ = (id) => document.getElementById(id);
  const state = { history: [], lastBody: null, lastRun: null, abort: null, keyNeeded: false };

  function fn(name, description, properties, required) {
    return { type: "function", function: { name, description, parameters: { type: "object", properties, required } } };
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    Object.assign(node, props || {});
    for (const child of children) node.append(child);
    return node;
  }

  // --- the server: key, errors, requests ------------------------------------------------
  function apiKey() { return sessionStorage.getItem(KEY_STORE) || ""; }

  async function api(path, init) {
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

  function notice(text) {
    const box = $("notice");
    box.textContent = text;
    box.hidden = !text;
  }

  async function errorText(res) {
    try {
      const body = await res.json();
      const err = body.error || {};
      return `${res.status}: ${err.message || JSON.stringify(body)}${err.param ? ` (${err.param})` : ""}`;
    } catch (e) {
      return `${res.status} ${res.statusText}`;
    }
  }

  async function loadModel() {
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

  // --- the request form ---------------------------------------------------------------
  function parseJSON(id, what) {
    const text = $(id).value.trim();
    if (!text) return null;
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new Error(`${what} is not valid JSON: ${e.message}`);
    }
  }

  function toolNames() {
    try {
      const tools = parseJSON("tools", "Tools");
      return Array.isArray(tools) ? tools.map((t) => t && t.function && t.function.name).filter(Boolean) : [];
    } catch (e) {
      return [];
    }
  }

  function refreshToolChoice(preferred) {
    const select = $("tool-choice");
    const keep = preferred || select.value;
    const names = toolNames();
    select.textContent = "";
    const values = names.length ? ["auto", "required", "none", ...names.map((n) => "fn:" + n)] : ["none"];
    for (const v of values) {
      select.append(el("option", { value: v, textContent: v.startsWith("fn:") ? `function ${v.slice(3)}` : v }));
    }
    select.value = values.includes(keep) ? keep : values[0];
    select.disabled = !names.length;
  }

  function useExample(name) {
    const ex = EXAMPLES[name];
    $("tools").value = ex ? JSON.stringify(ex.tools, null, 2) : "";
    if (ex) $("message").value = ex.message;
    refreshToolChoice(ex ? "required" : "none");
  }

  function buildBody() {
    const messages = [];
    const system = $("system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages.push(...state.history);
    const next = newMessage();
    if (next) messages.push(next);
    if (!messages.some((m) => m.role !== "system")) throw new Error("Write a message first.");
    const body = {
      model: "default", messages, stream: $("stream").checked,
      temperature: Number($("temperature").value || 0),
      max_tokens: Math.max(1, Math.round(Number($("max-tokens").value || 64))),
      ffwd: { tokens: true },
    };
    if ($("fill").value) body.ffwd.fill = $("fill").value;
    if (body.stream) body.stream_options = { include_usage: true };
    if ($("logprobs").checked) Object.assign(body, { logprobs: true, top_logprobs: 3 });
    const tools = parseJSON("tools", "Tools");
    if (tools && tools.length) {
      body.tools = tools;
      const choice = $("tool-choice").value;
      body.tool_choice = choice.startsWith("fn:")
        ? { type: "function", function: { name: choice.slice(3) } } : choice;
    }
    const format = $("response-format").value;
    if (format === "json_object") body.response_format = { type: "json_object" };
    if (format === "json_schema") {
      body.response_format = {
        type: "json_schema",
        json_schema: { name: "reply", schema: parseJSON("schema", "The schema") || {}, strict: true },
      };
    }
    return { body, next };
  }

  function newMessage() {
    const content = $("message").value.trim();
    if (!content) return null;
    if ($("role").value !== "tool") return { role: "user", content };
    const last = [...state.history].reverse().find((m) => m.tool_calls && m.tool_calls.length);
    const id = last ? last.tool_calls[last.tool_calls.length - 1].id : undefined;
    return id ? { role: "tool", content, tool_call_id: id } : { role: "tool", content };
  }

  function renderHistory() {
    const list = $("history");
    list.textContent = "";
    for (const m of state.history) {
      const text = m.content || (m.tool_calls || [])
        .map((c) => `${c.function.name}(${c.function.arguments})`).join(", ");
      list.append(el("li", {}, el("span", { className: "who", textContent: m.role }), text));
    }
  }

  // --- running one request ------------------------------------------------------------
  async function readEvents(res, onEvent) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          if (line === "data: [DONE]") return;
          onEvent(JSON.parse(line.slice(6)));
        }
      }
    }
  }

  function onChunk(run, view, chunk) {
    if (chunk.error) throw new Error(chunk.error.message || "the stream failed");
    const choice = chunk.choices && chunk.choices[0];
    const tokens = chunk.ffwd && chunk.ffwd.tokens;
    if (tokens && tokens.length) {
      if (run.ttft === null) run.ttft = performance.now() - run.started;
      view.add(tokens, choice && choice.logprobs ? choice.logprobs.content : null);
    }
    if (choice) {
      const delta = choice.delta || {};
      if (delta.content) run.content += delta.content;
      for (const part of delta.tool_calls || []) {
        const call = run.calls[part.index] || (run.calls[part.index] = { id: "", name: "", arguments: "" });
        if (part.id) call.id = part.id;
        if (part.function && part.function.name) call.name = part.function.name;
        call.arguments += (part.function && part.function.arguments) || "";
        view.nameCall(part.index, call.name);
      }
      if (choice.finish_reason) run.finish = choice.finish_reason;
    }
    if (chunk.usage) Object.assign(run, { usage: chunk.usage, block: chunk.ffwd });
  }

  async function run(body, view, signal) {
    const result = {
      started: performance.now(), ttft: null, wall: null, content: "", calls: [],
      finish: null, usage: null, block: null, stream: body.stream,
    };
    const res = await api("/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal,
    });
    if (!res.ok) throw new Error(await errorText(res));
    if (body.stream) {
      await readEvents(res, (chunk) => onChunk(result, view, chunk));
    } else {
      const whole = await res.json();
      const choice = whole.choices[0];
      Object.assign(result, {
        usage: whole.usage, block: whole.ffwd, finish: choice.finish_reason,
        content: choice.message.content || "",
        calls: (choice.message.tool_calls || []).map((c) => ({
          id: c.id, name: c.function.name, arguments: c.function.arguments })),
      });
      view.add(whole.ffwd.tokens || [], choice.logprobs ? choice.logprobs.content : null);
    }
    result.wall = performance.now() - result.started;
    view.finish(result.calls);
    return result;
  }

  // --- tokens on the page -------------------------------------------------------------
  class TokenView {
    constructor(container) {
      this.el = container;
      this.el.textContent = "";
      this.items = [];
      this.pending = [];
      this.segments = [];
      this.calls = new Map();
      this.counts = {};
      if (!container.tokenView) {  // once per element: the latest view answers
        container.addEventListener("keydown", (e) => container.tokenView.key(e));
        container.addEventListener("mouseover", (e) => container.tokenView.point(e.target));
        container.addEventListener("focusin", (e) => container.tokenView.point(e.target));
        container.addEventListener("mouseout", hideTip);
        container.addEventListener("focusout", hideTip);
      }
      container.tokenView = this;
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

  function fmt(x, digits) { return Number.isFinite(x) ? x.toFixed(digits) : "\u2014"; }

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

  function hideTip() { $("tip").hidden = true; }

  // --- per-reply numbers --------------------------------------------------------------
  function numbers(result) {
    const block = result.block || {};
    const ids = result.usage ? result.usage.completion_tokens : 0;
    const forwards = block.forward_calls || 0;
    const decode = Math.max(1e-6, (block.seconds || 0) - (block.prefill_seconds || 0));
    const injected = Object.values(block.injected_by_origin || {}).reduce((a, b) => a + b, 0);
    return { ids, forwards, decode, injected, seconds: block.seconds || 0, fill: block.fill || "?" };
  }

  function renderStats(result, view) {
    const n = numbers(result);
    const items = [
      ["finish", result.finish || "\u2014"],
      ["ids", String(n.ids)],
      ["forwards", String(n.forwards)],
      ["ids per forward", fmt(n.ids / Math.max(1, n.forwards), 2)],
      ["injected", `${n.injected} (${fmt(100 * n.injected / Math.max(1, n.ids), 0)}%)`],
      [result.stream ? "time to first token" : "response time (not streamed)",
        `${fmt((result.stream ? result.ttft : result.wall) / 1000, 3)} s`],
      ["decode tokens/s", fmt(n.ids / n.decode, 1)],
      ["fill", n.fill],
    ];
    $("stats").replaceChildren(...items.map(([k, v]) => el("div", {},
      el("dt", { textContent: k }), el("dd", { textContent: v }))));
    const share = $("share");
    share.replaceChildren();
    for (const origin of Object.keys(ORIGINS)) {
      const count = view.counts[origin] || 0;
      if (!count) continue;
      const bar = el("span", { title: `${origin}: ${count}` });
      bar.style.width = `${100 * count / Math.max(1, view.items.length)}%`;
      bar.style.background = `var(--${origin}-edge)`;
      share.append(bar);
    }
    renderLegend(view.counts);
  }

  function renderLegend(counts) {
    const legend = $("legend");
    legend.replaceChildren();
    for (const origin of Object.keys(ORIGINS)) {
      if (!ALWAYS_SHOWN.includes(origin) && !counts[origin]) continue;
      legend.append(el("li", { title: ORIGINS[origin] },
        el("span", { className: `swatch o-${origin}`, ariaHidden: "true" }),
        origin, el("span", { className: "count", textContent: counts[origin] ? ` ${counts[origin]}` : "" })));
    }
  }

  // --- send, stop, compare -------------------------------------------------------------
  function busy(on) {
    $("reply").setAttribute("aria-busy", String(on));
    $("send").disabled = on;
    $("stop").disabled = !on;
    $("compare").disabled = on || !state.lastRun;
  }

  async function send(event) {
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
    const view = new TokenView($("output"));
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

  async function compare() {
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

  // --- the live panel: /metrics as a plot ----------------------------------------------
  const live = { prev: null, points: [], max: 60 };

  function parseMetrics(text) {
    const out = [];
    for (const line of text.split("\n")) {
      const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m || line.startsWith("#")) continue;
      const labels = {};
      for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
      out.push({ name: m[1], labels, value: Number(m[3]) });
    }
    return out;
  }

  function total(samples, name, keep) {
    return samples.filter((s) => s.name === name && (!keep || keep(s.labels)))
      .reduce((sum, s) => sum + s.value, 0);
  }

  async function poll() {
    if (document.hidden || state.keyNeeded) return;
    let text;
    try {
      const res = await api("/metrics");
      if (!res.ok) return;
      text = await res.text();
    } catch (e) {
      return;
    }
    const s = parseMetrics(text);
    const now = {
      t: performance.now() / 1000,
      requests: total(s, "ffwd_requests_total", (l) => /^\/v1\/(?!models)/.test(l.endpoint || "")),
      tokens: total(s, "ffwd_completion_tokens_total"),
      injected: total(s, "ffwd_injected_tokens_total"),
      forwards: s.some((x) => x.name === "ffwd_forward_calls_total")  // not on a Ray ingress
        ? `, ${total(s, "ffwd_forward_calls_total")} forwards` : "",
    };
    const prev = live.prev;
    if (prev) {
      const dt = Math.max(1e-3, now.t - prev.t);
      const tokens = now.tokens - prev.tokens;
      live.points.push({
        requests: (now.requests - prev.requests) * 60 / dt, tps: tokens / dt,
        share: tokens > 0 ? (now.injected - prev.injected) / tokens : null,
      });
      if (live.points.length > live.max) live.points.shift();
    }
    live.prev = now;
    const overall = now.tokens ? `${fmt(100 * now.injected / now.tokens, 0)}% injected` : "none injected yet";
    $("totals").textContent = `Since the server started: ${now.requests} API ` +
      `request${now.requests === 1 ? "" : "s"}, ` +
      `${now.tokens} completion ids (${overall})${now.forwards}.`;
    draw();
  }

  function draw() {
    const canvas = $("plot");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 600;
    const height = canvas.clientHeight || 210;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const rows = [
      ["requests / min", "requests", "#1d4ed8", (v) => fmt(v, 0)],
      ["tokens / s", "tps", "#6d28d9", (v) => fmt(v, 1)],
      ["injected share", "share", "#15803d", (v) => `${fmt(100 * v, 0)}%`],
    ];
    const rowH = height / rows.length;
    const labelW = Math.min(150, width * 0.38);
    const said = [];
    rows.forEach(([label, key, colour, show], r) => {
      const top = r * rowH + 6;
      const h = rowH - 18;
      const values = live.points.map((p) => p[key]);
      const known = values.filter((v) => v !== null);
      const last = known.length ? known[known.length - 1] : null;
      const max = key === "share" ? 1 : Math.max(1e-9, ...known, key === "tps" ? 10 : 1);
      g.fillStyle = "#16181d";
      g.font = "600 13px system-ui, sans-serif";
      g.fillText(label, 0, top + 14);
      g.font = "20px system-ui, sans-serif";
      g.fillStyle = colour;
      g.fillText(last === null ? "\u2014" : show(last), 0, top + 38);
      said.push(`${label} ${last === null ? "none yet" : show(last)}`);
      g.strokeStyle = "#c9ced6";
      g.lineWidth = 1;
      g.beginPath();
      g.moveTo(labelW, top + h + 0.5);
      g.lineTo(width, top + h + 0.5);
      g.stroke();
      g.fillStyle = "#4f5663";
      g.font = "11px system-ui, sans-serif";
      g.fillText(show(max), labelW + 2, top + 10);
      g.strokeStyle = colour;
      g.lineWidth = 2;
      g.beginPath();
      let pen = false;
      values.forEach((v, i) => {
        if (v === null) { pen = false; return; }
        const x = labelW + (width - labelW) * (i + live.max - values.length) / (live.max - 1);
        const y = top + h - h * Math.min(1, v / max);
        if (pen) g.lineTo(x, y); else g.moveTo(x, y);
        pen = true;
      });
      g.stroke();
    });
    canvas.setAttribute("aria-label", `Live server metrics over the last two minutes: ${said.join(", ")}`);
  }

  // --- wiring -------------------------------------------------------------------------
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
})();
