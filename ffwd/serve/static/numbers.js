// Per-reply numbers: the stats, the share of each origin, the legend.
import { $, el, fmt } from "./dom.js";
import { ORIGINS } from "./tokens.js";

const ALWAYS_SHOWN = ["sampled", "template", "schema", "grammar", "echo", "recall"];

export function numbers(result) {
  const block = result.block || {};
  const ids = result.usage ? result.usage.completion_tokens : 0;
  const forwards = block.forward_calls || 0;
  const decode = Math.max(1e-6, (block.seconds || 0) - (block.prefill_seconds || 0));
  const injected = Object.values(block.injected_by_origin || {}).reduce((a, b) => a + b, 0);
  return { ids, forwards, decode, injected, seconds: block.seconds || 0, fill: block.fill || "?" };
}

export function renderStats(result, view) {
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

export function renderLegend(counts) {
  const legend = $("legend");
  legend.replaceChildren();
  for (const origin of Object.keys(ORIGINS)) {
    if (!ALWAYS_SHOWN.includes(origin) && !counts[origin]) continue;
    legend.append(el("li", { title: ORIGINS[origin] },
      el("span", { className: `swatch o-${origin}`, ariaHidden: "true" }),
      origin, el("span", { className: "count", textContent: counts[origin] ? ` ${counts[origin]}` : "" })));
  }
}
