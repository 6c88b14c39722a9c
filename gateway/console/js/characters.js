// Characters: edit a character file in the browser. As you type, the draft is checked by
// the gateway with `troupe check`'s own checker; problems show at line:col, marked in the
// gutter. Saving first shows the diff against the file on disk; the gateway writes it
// atomically, and hot reload picks it up. A new persona starts from a template.

import { api, agents, enc } from './api.js';
import { h, clear, errorBox } from './dom.js';
import { diffLines } from './diff.js';
import { setParam } from './app.js';

export async function render(root, params) {
  root.append(h('h1', {}, 'Characters'));
  const files = h('ul', { id: 'character-files' });
  const editorCard = h('section', { class: 'card', id: 'editor-card' }, h('p', { class: 'muted' }, 'Open a file, or start a new persona.'));
  const newName = h('input', { id: 'new-name', placeholder: 'Persona name', size: 16 });
  const newButton = h('button', { id: 'new-persona', class: 'quiet' }, 'New from template');
  root.append(h('div', { class: 'cols' },
    h('section', { class: 'card' }, h('h2', {}, 'Files'), files, h('div', { class: 'row' }, newName, newButton)),
    editorCard));

  let timer = null;
  const listFiles = async () => {
    const answer = await api('/api/characters');
    clear(files, answer.files.map((f) => h('li', {}, h('a', { href: '#', dataset: { file: f.file }, onclick: (e) => { e.preventDefault(); open(f.file); } }, f.file),
      f.agentId ? h('span', { class: 'muted' }, ` · ${f.agentId}`) : h('span', { class: 'warn' }, ' · not loaded'))));
  };

  const edit = (file, text, revision) => {
    setParam('file', file);
    const gutter = h('div', { class: 'gutter', 'aria-hidden': 'true' });
    const area = h('textarea', { class: 'code', id: 'source', spellcheck: false, 'aria-label': file });
    area.value = text;
    const problems = h('ul', { class: 'problems', id: 'problems', 'aria-live': 'polite' });
    const status = h('span', { id: 'check-status', class: 'muted' });
    const review = h('button', { id: 'review' }, 'Review and save');
    const diffBox = h('div', { id: 'diff-box' });
    let bad = new Set();

    const draw = () => {
      const lines = area.value.split('\n').length;
      clear(gutter, Array.from({ length: lines }, (_, i) => [h('span', { class: bad.has(i + 1) ? 'bad' : '' }, String(i + 1)), '\n']));
      area.rows = lines + 1;
      // Long lines scroll with the editor instead of being cut off.
      area.cols = Math.max(40, ...area.value.split('\n').map((l) => l.length + 2));
    };
    const check = async () => {
      status.textContent = 'checking…';
      try {
        const answer = await api('/api/characters/check', { method: 'POST', json: { file, text: area.value } });
        bad = new Set(answer.problems.filter((p) => p.file === file && p.severity === 'error').map((p) => p.line));
        clear(problems, answer.problems.map((p) => h('li', { class: p.severity === 'error' ? 'error' : 'warn', dataset: { line: p.line, col: p.col } },
          h('a', { href: '#', onclick: (e) => { e.preventDefault(); jump(p.line, p.col); } }, `${p.file}:${p.line}:${p.col}`), ` ${p.path}: ${p.message}`)));
        status.textContent = answer.ok ? 'no errors' : `${bad.size || answer.problems.length} error(s)`;
        status.className = answer.ok ? 'ok' : 'error';
        review.disabled = !answer.ok;
      } catch (e) { clear(problems, errorBox(e)); status.textContent = ''; }
      draw();
    };
    const jump = (line, col) => {
      const lines = area.value.split('\n');
      let at = 0;
      for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
      area.focus();
      area.setSelectionRange(at + col - 1, at + col - 1);
    };
    area.addEventListener('input', () => { draw(); clearTimeout(timer); timer = setTimeout(check, 300); });

    review.addEventListener('click', async () => {
      let disk = '';
      try { disk = revision ? (await api(`/api/characters/${enc(file)}`)).text : ''; } catch (e) { clear(diffBox, errorBox(e)); return; }
      const changes = diffLines(disk, area.value);
      const save = h('button', { id: 'save' }, revision ? 'Save' : 'Create');
      const result = h('span', { id: 'save-status' });
      save.addEventListener('click', async () => {
        save.disabled = true;
        try {
          const saved = await api(`/api/characters/${enc(file)}`, { method: 'PUT', json: { file, text: area.value, baseRevision: revision } });
          revision = saved.revision;
          result.className = 'ok';
          result.textContent = 'Saved; the gateway reloads it within a second.';
          listFiles();
        } catch (e) { result.className = 'error'; result.textContent = e.message; save.disabled = false; }
      });
      clear(diffBox, h('h3', {}, revision ? 'Changes against the file on disk' : 'New file'),
        h('div', { class: 'diff', id: 'diff' }, changes.map((c) => h('div', { class: c.op }, `${c.op === 'add' ? '+' : c.op === 'del' ? '-' : ' '} ${c.text}`))),
        h('div', { class: 'row' }, save, result));
    });

    clear(editorCard, h('h2', {}, file), h('div', { class: 'editor' }, gutter, area), h('div', { class: 'row' }, status, review), problems, diffBox);
    draw();
    check();
  };

  const open = async (file) => {
    clearTimeout(timer);
    try {
      const f = await api(`/api/characters/${enc(file)}`);
      edit(f.file, f.text, f.revision);
    } catch (e) { clear(editorCard, errorBox(e)); }
  };

  newButton.addEventListener('click', async () => {
    const name = newName.value.trim() || 'New persona';
    const slug = name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '') || 'persona';
    const template = await (await fetch('/console/template.json')).json();
    template.name = name;
    for (const example of template.messageExamples) for (const line of example) if (line.user !== "{{user1}}") line.user = name;
    edit(`${slug}.json`, `${JSON.stringify(template, null, 2)}\n`, null);
  });

  await listFiles();
  if (params.get('file')) await open(params.get('file'));
  await agents(true);
  return () => clearTimeout(timer);
}
