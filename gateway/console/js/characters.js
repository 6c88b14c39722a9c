// Characters: edit a character file in the browser. As you type, the draft is checked by
// the gateway with `troupe check`'s own checker; problems show at line:col, marked in the
// gutter. Saving first shows the diff against the file on disk; the gateway writes it
// atomically, and hot reload picks it up. A new persona starts from a template.

import { api, agents, enc, latest, STALE } from './api.js';
import { h, clear, errorBox } from './dom.js';
import { diffLines } from './diff.js';
import { setParam } from './route.js';

// The check as you type: one timer and one request in flight for the page, whichever file
// is open. Only the newest draft's answer is drawn, so a slow check of an older draft never
// overwrites the problems of the text on screen; `stop()` drops both (another file opened,
// the page left).
function checker() {
  const request = latest();
  let timer = null;
  return {
    request,
    later(check) { clearTimeout(timer); timer = setTimeout(check, 300); },
    stop() { clearTimeout(timer); request.cancel(); },
  };
}

// "Review and save": the diff of the editor's text (`text()`) against the file on disk
// (none for a new file), and the button that writes the text as it is then. A refusal shows the API's `{error, detail}`
// (`conflict: … exists already; open it to edit it`).
async function review(diffBox, draft, text, onSaved) {
  let disk = '';
  try { disk = draft.revision ? (await api(`/api/characters/${enc(draft.file)}`)).text : ''; } catch (e) { clear(diffBox, errorBox(e)); return; }
  const changes = diffLines(disk, text());
  const save = h('button', { id: 'save' }, draft.revision ? 'Save' : 'Create');
  const result = h('span', { id: 'save-status', role: 'status' });
  save.addEventListener('click', async () => {
    save.disabled = true;
    try {
      const saved = await api(`/api/characters/${enc(draft.file)}`, { method: 'PUT', json: { file: draft.file, text: text(), baseRevision: draft.revision } });
      draft.revision = saved.revision;
      result.className = 'ok';
      result.textContent = 'Saved; the gateway reloads it within a second.';
      onSaved();
    } catch (e) { result.className = 'error'; result.textContent = e.message; save.disabled = false; }
  });
  clear(diffBox, h('h3', {}, draft.revision ? 'Changes against the file on disk' : 'New file'),
    h('div', { class: 'diff', id: 'diff' }, changes.map((c) => h('div', { class: c.op }, `${c.op === 'add' ? '+' : c.op === 'del' ? '-' : ' '} ${c.text}`))),
    h('div', { class: 'row' }, save, result));
}

// The editor of one draft (`{file, text, revision}`; no revision for a new file) in `card`:
// line numbers, the problems of the last check, and "Review and save".
function editor(card, draft, checks, onSaved) {
  const { file } = draft;
  setParam('file', file);
  const gutter = h('div', { class: 'gutter', 'aria-hidden': 'true' });
  const area = h('textarea', { class: 'code', id: 'source', spellcheck: false, 'aria-label': file });
  area.value = draft.text;
  const problems = h('ul', { class: 'problems', id: 'problems', 'aria-live': 'polite' });
  const status = h('span', { id: 'check-status', class: 'muted' });
  const reviewButton = h('button', { id: 'review' }, 'Review and save');
  const diffBox = h('div', { id: 'diff-box' });
  let bad = new Set();

  const draw = () => {
    const lines = area.value.split('\n').length;
    clear(gutter, Array.from({ length: lines }, (_, i) => [h('span', { class: bad.has(i + 1) ? 'bad' : '' }, String(i + 1)), '\n']));
    area.rows = lines + 1;
    // Long lines scroll with the editor instead of being cut off.
    area.cols = Math.max(40, ...area.value.split('\n').map((l) => l.length + 2));
  };
  const jump = (line, col) => {
    const lines = area.value.split('\n');
    let at = 0;
    for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
    area.focus();
    area.setSelectionRange(at + col - 1, at + col - 1);
  };
  const check = async () => {
    status.textContent = 'checking…';
    try {
      const answer = await checks.request('/api/characters/check', { method: 'POST', json: { file, text: area.value } });
      if (answer === STALE) return;
      bad = new Set(answer.problems.filter((p) => p.file === file && p.severity === 'error').map((p) => p.line));
      clear(problems, answer.problems.map((p) => h('li', { class: p.severity === 'error' ? 'error' : 'warn', dataset: { line: p.line, col: p.col } },
        h('a', { href: '#', onclick: (e) => { e.preventDefault(); jump(p.line, p.col); } }, `${p.file}:${p.line}:${p.col}`), ` ${p.path}: ${p.message}`)));
      status.textContent = answer.ok ? 'no errors' : `${bad.size || answer.problems.length} error(s)`;
      status.className = answer.ok ? 'ok' : 'error';
      reviewButton.disabled = !answer.ok;
    } catch (e) { clear(problems, errorBox(e)); status.textContent = ''; }
    draw();
  };
  area.addEventListener('input', () => { draw(); checks.later(check); });
  reviewButton.addEventListener('click', () => review(diffBox, draft, () => area.value, onSaved));

  clear(card, h('h2', {}, file), h('div', { class: 'editor' }, gutter, area), h('div', { class: 'row' }, status, reviewButton), problems, diffBox);
  draw();
  check();
}

// A new persona's draft: its file, named after it, and the template with its name filled in.
function newFile(name) {
  const slug = name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '') || 'persona';
  return `${slug}.json`;
}

async function fromTemplate(name) {
  const template = await api('/console/template.json');
  template.name = name;
  for (const example of template.messageExamples) for (const line of example) if (line.user !== '{{user1}}') line.user = name;
  return `${JSON.stringify(template, null, 2)}\n`;
}

export async function render(root, params) {
  root.append(h('h1', {}, 'Characters'));
  const files = h('ul', { id: 'character-files' });
  const editorCard = h('section', { class: 'card', id: 'editor-card' }, h('p', { class: 'muted' }, 'Open a file, or start a new persona.'));
  const newName = h('input', { id: 'new-name', placeholder: 'Persona name', size: 16 });
  const newButton = h('button', { id: 'new-persona', class: 'quiet' }, 'New from template');
  const newStatus = h('div', { id: 'new-status', 'aria-live': 'polite' });
  root.append(h('div', { class: 'cols' },
    h('section', { class: 'card' }, h('h2', {}, 'Files'), files, h('div', { class: 'row' }, newName, newButton), newStatus),
    editorCard));

  const checks = checker();
  let known = [];
  const listFiles = async () => {
    const answer = await api('/api/characters');
    known = answer.files.map((f) => f.file);
    clear(files, answer.files.map((f) => h('li', {}, h('a', { href: '#', dataset: { file: f.file }, onclick: (e) => { e.preventDefault(); open(f.file); } }, f.file),
      f.agentId ? h('span', { class: 'muted' }, ` · ${f.agentId}`) : h('span', { class: 'warn' }, ' · not loaded'))));
  };
  const edit = (draft) => { checks.stop(); editor(editorCard, draft, checks, listFiles); };

  const open = async (file) => {
    checks.stop();
    try {
      const f = await api(`/api/characters/${enc(file)}`);
      edit({ file: f.file, text: f.text, revision: f.revision });
    } catch (e) { clear(editorCard, errorBox(e)); }
  };

  // The new-persona form: its errors (a name whose file exists, the template not loading)
  // show under it, and the editor is left as it was.
  newButton.addEventListener('click', async () => {
    clear(newStatus);
    const name = newName.value.trim() || 'New persona';
    const file = newFile(name);
    if (known.includes(file)) {
      clear(newStatus, errorBox(`\`${file}\` exists already: open it to edit it, or pick another name.`));
      return;
    }
    try {
      edit({ file, text: await fromTemplate(name), revision: null });
    } catch (e) { clear(newStatus, errorBox(e)); }
  });

  await listFiles();
  if (params.get('file')) await open(params.get('file'));
  await agents(true);
  return () => checks.stop();
}
