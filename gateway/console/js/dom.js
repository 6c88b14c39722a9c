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

// A retrieval score: BM25 and fused scores differ by orders of magnitude; three figures.
export function score(value) {
  return Number.isFinite(value) ? String(Number(value.toPrecision(3))) : '–';
}

export function errorBox(e) {
  return h('p', { class: 'error', role: 'alert' }, e && e.message ? e.message : String(e));
}

// The persona picker every page shares; remembers the choice in the URL hash.
export function agentPicker(agents, selected, onChange) {
  return h('select', { 'aria-label': 'persona', id: 'agent', onchange: (e) => onChange(e.target.value) },
    agents.map((a) => h('option', { value: a.id, selected: a.id === selected }, `${a.name} (${a.id})`)));
}
