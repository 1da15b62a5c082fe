// Helpers every part of the page uses.

export const $ = (id) => document.getElementById(id);

export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children) node.append(child);
  return node;
}

export function fmt(x, digits) { return Number.isFinite(x) ? x.toFixed(digits) : "\u2014"; }
