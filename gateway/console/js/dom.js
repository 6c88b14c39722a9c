// Building the page: elements from data, always as text (never innerHTML), so nothing a
// stranger wrote into a message, a fact or a document can run in the console.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key in el && typeof value !== 'string') el[key] = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function when(ms) {
  if (!ms) return '';
  return new Date(ms).toLocaleString();
}

// A retrieval score, to three figures: BM25 and fused scores differ by orders of magnitude.
function score(value) {
  return Number.isFinite(value) ? String(Number(value.toPrecision(3))) : '–';
}

// How the passage at `index` ranks among those found with it (`scores`, higher is better):
// `rank 2 of 5 · 80% of the best`. A raw score (`0.00000437` fused, `7.1` BM25) means
// nothing to a reader, so it is only the tooltip.
export function relevance(scores, index) {
  const own = scores[index];
  const rank = 1 + scores.filter((s) => s > own).length;
  const best = Math.max(...scores);
  let text = `rank ${rank} of ${scores.length}`;
  if (rank > 1 && best > 0 && Number.isFinite(own)) text += ` · ${Math.round((100 * own) / best)}% of the best`;
  return h('span', { class: 'muted relevance', title: `score ${score(own)}`, dataset: { rank } }, text);
}

export function errorBox(e) {
  return h('p', { class: 'error', role: 'alert' }, e && e.message ? e.message : String(e));
}
