// The live panel: /metrics, polled, as a plot.
import { $, fmt } from "./dom.js";
import { api } from "./server.js";
import { state } from "./state.js";

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

export async function poll() {
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

export function draw() {
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
