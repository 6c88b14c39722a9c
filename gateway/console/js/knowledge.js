// Knowledge: drop several files (each uploaded on its own, with its progress bar), list
// and delete documents, scope them to a room, and search, with each passage's source and rank.

import { api, enc, upload, latest, STALE } from './api.js';
import { h, clear, errorBox, relevance, when } from './dom.js';
import { choosePersona } from './picker.js';

// Search as you type (`path()` is the persona's search route, `scope` the room scope):
// only the newest query's answer is drawn (an earlier, slower one is dropped), and
// emptying the box drops the one in flight. `stop()` when the page is left.
function searchBox(path, scope) {
  const q = h('input', { id: 'q', type: 'search', placeholder: 'Search the knowledge…', size: 40 });
  const results = h('div', { id: 'results' });
  const searching = latest();
  let timer = null;
  const search = async () => {
    const query = q.value.trim();
    if (!query) { searching.cancel(); clear(results); return; }
    const room = scope.value.trim() ? `&roomId=${enc(scope.value.trim())}` : '';
    try {
      const answer = await searching(`${path()}?q=${enc(query)}${room}`);
      if (answer === STALE) return;
      const scores = answer.results.map((r) => r.score);
      clear(results, answer.results.length ? answer.results.map((r, i) => h('div', { class: 'passage', dataset: { source: r.source } },
        h('div', {}, h('strong', {}, r.source), ' ', relevance(scores, i)), h('pre', {}, r.text)))
        : h('p', { class: 'muted' }, 'Nothing matches.'));
    } catch (e) { clear(results, errorBox(e)); }
  };
  q.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(search, 250); });
  return { q, results, stop: () => { clearTimeout(timer); searching.cancel(); } };
}

export async function render(root, params) {
  root.append(h('h1', {}, 'Knowledge'));
  const chosen = await choosePersona(root, params, (v) => { agent = v; refresh(); });
  if (!chosen) return;
  let { agent } = chosen;
  const scope = h('input', { id: 'scope', placeholder: 'whole persona', size: 18, 'aria-label': 'room scope' });
  const picker = h('input', { type: 'file', multiple: true, id: 'files', 'aria-label': 'files' });
  const drop = h('div', { class: 'drop', id: 'drop' }, 'Drop files here (PDF, text, Markdown, HTML…), or ', picker);
  const uploads = h('div', { id: 'uploads' });
  const docs = h('table', { id: 'documents' });

  const refresh = async () => {
    clear(docs, h('tr', {}, h('th', {}, 'Source'), h('th', {}, 'Scope'), h('th', {}, 'Chunks'), h('th', {}, 'Size'), h('th', {}, 'Added'), h('th', {})));
    try {
      // With a room scope, the room's documents only.
      const room = scope.value.trim() ? `?roomId=${enc(scope.value.trim())}` : '';
      const answer = await api(`/api/agents/${enc(agent)}/documents${room}`);
      if (!answer.documents.length) docs.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No documents yet.')));
      for (const d of answer.documents) {
        const row = h('tr', { dataset: { document: d.id, source: d.source } },
          h('td', {}, d.source), h('td', {}, d.roomId || 'persona'), h('td', {}, d.chunks), h('td', {}, `${Math.ceil(d.bytes / 1024)} KB`), h('td', { class: 'muted' }, when(d.createdAtMs)),
          h('td', {}, h('button', { class: 'danger', onclick: async () => { try { await api(`/api/agents/${enc(agent)}/documents/${enc(d.id)}`, { method: 'DELETE' }); row.remove(); } catch (e) { row.after(h('tr', {}, h('td', { colspan: 6 }, errorBox(e)))); } } }, 'Delete')));
        docs.append(row);
      }
    } catch (e) { docs.append(h('tr', {}, h('td', {}, errorBox(e)))); }
  };

  const send = (files) => Promise.all(Array.from(files).map(async (file) => {
    const bar = h('progress', { max: 1, value: 0 });
    const status = h('span', { class: 'muted' }, 'uploading');
    uploads.append(h('div', { class: 'upload', dataset: { file: file.name } }, h('span', {}, file.name), bar, status));
    const form = new FormData();
    if (scope.value.trim()) form.append('roomId', scope.value.trim());
    form.append('file', file, file.name);
    try {
      const answer = await upload(`/api/agents/${enc(agent)}/documents`, form, (loaded, total) => { if (total) bar.value = loaded / total; });
      bar.value = 1;
      status.className = 'ok';
      status.textContent = answer.duplicate ? 'already known' : `${answer.chunks} chunks`;
    } catch (e) {
      status.className = 'error';
      status.textContent = e.message;
    }
  })).then(refresh);

  picker.addEventListener('change', () => send(picker.files));
  scope.addEventListener('change', refresh);
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); drop.classList.remove('over'); send(e.dataTransfer.files); });

  const search = searchBox(() => `/api/agents/${enc(agent)}/knowledge/search`, scope);

  root.append(
    h('div', { class: 'row' }, 'Persona ', chosen.picker, ' Room scope ', scope),
    h('section', { class: 'card' }, drop, uploads),
    h('div', { class: 'cols' },
      h('section', { class: 'card' }, h('h2', {}, 'Documents'), docs),
      h('section', { class: 'card' }, h('h2', {}, 'Search'), search.q, search.results)));
  await refresh();
  return search.stop;
}
