// Posts: each persona's schedules of autonomous posts (where, how often, the next run),
// adding and removing the API's own, and its recent posts: sent, kept in dry run
// (FARCASTER_DRY_RUN), or skipped and why (docs/posts.md). And the drafts of schedules
// with `approve: true` (issue 47): approve, edit or reject each before it goes out.

import { api, enc } from './api.js';
import { h, clear, errorBox, when } from './dom.js';
import { choosePersona } from './picker.js';

// How a stored schedule runs, in words.
function cadence(spec) {
  if (spec.every) return `every ${spec.every}${spec.jitter ? ` (+ up to ${spec.jitter})` : ''}`;
  if (spec.at) return `daily at ${spec.at} ${spec.timezone || 'UTC'}${spec.jitter ? ` (+ up to ${spec.jitter})` : ''}`;
  if (spec.intervalMin) return `every ${spec.intervalMin}–${spec.intervalMax || spec.intervalMin}${spec.immediately ? ', at start too' : ''}`;
  return '';
}

export async function render(root, params) {
  root.append(h('h1', {}, 'Posts'));
  const chosen = await choosePersona(root, params, (v) => { agent = v; refresh(); });
  if (!chosen) return;
  let { agent } = chosen;
  const schedules = h('table', { id: 'schedules' });
  const recent = h('table', { id: 'recent-posts' });
  const drafts = h('div', { id: 'drafts' });
  const problem = h('div', {});
  const room = h('input', { id: 'post-room', placeholder: 'discord:<channel id>', size: 28, 'aria-label': 'room' });
  const every = h('input', { id: 'post-every', placeholder: '6h', size: 6, 'aria-label': 'every' });
  const at = h('input', { id: 'post-at', placeholder: 'or 09:00', size: 6, 'aria-label': 'at' });
  const zone = h('input', { id: 'post-timezone', placeholder: 'Europe/Berlin', size: 14, 'aria-label': 'timezone' });
  const prompt = h('input', { id: 'post-prompt', placeholder: 'what about (optional)', size: 30, 'aria-label': 'prompt' });
  const approve = h('input', { id: 'post-approve', type: 'checkbox', 'aria-label': 'approve each post' });

  const refresh = async () => {
    clear(problem);
    clear(schedules, h('tr', {}, h('th', {}, 'Schedule'), h('th', {}, 'From'), h('th', {}, 'Room'), h('th', {}, 'When'), h('th', {}, 'Next run'), h('th', {})));
    clear(recent, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Room'), h('th', {}, 'State'), h('th', {}, 'Post')));
    try {
      const answer = await api(`/api/agents/${enc(agent)}/posts`);
      if (!answer.schedules.length) schedules.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'This persona posts nothing on its own.')));
      for (const s of answer.schedules) {
        const remove = s.source === 'api' && h('button', { class: 'danger', onclick: async () => {
          try { await api(`/api/agents/${enc(agent)}/posts/${enc(s.id)}`, { method: 'DELETE' }); refresh(); } catch (e) { clear(problem, errorBox(e)); }
        } }, 'Delete');
        schedules.append(h('tr', { dataset: { schedule: s.id } }, h('td', {}, s.id), h('td', {}, s.source), h('td', {}, s.room),
          h('td', {}, cadence(s.spec)), h('td', { class: 'muted' }, when(s.nextRunMs)), h('td', {}, remove)));
      }
      if (!answer.recent.length) recent.append(h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No posts yet.')));
      for (const r of answer.recent) {
        recent.append(h('tr', { dataset: { state: r.state } }, h('td', { class: 'muted' }, when(r.createdAtMs)), h('td', {}, r.room),
          h('td', {}, r.state.replace('_', ' ')), h('td', {}, r.text || h('span', { class: 'muted' }, r.reason || ''))));
      }
      await refreshDrafts();
    } catch (e) { clear(problem, errorBox(e)); }
  };

  // One waiting draft: its text in a box to edit, then Save, Approve or Reject.
  const draftRow = (d) => {
    const path = `/api/agents/${enc(agent)}/posts/drafts/${d.id}`;
    const text = h('textarea', { id: `draft-text-${d.id}`, rows: 3, cols: 60, 'aria-label': `draft ${d.id}` });
    text.value = d.text || '';
    const act = (suffix, init) => async () => {
      try {
        if (suffix !== '/reject' && text.value !== (d.text || '')) await api(path, { method: 'PUT', json: { text: text.value } });
        if (suffix) await api(path + suffix, init);
        refresh();
      } catch (e) { clear(problem, errorBox(e)); }
    };
    return h('div', { class: 'card', dataset: { draft: String(d.id) } },
      h('div', { class: 'muted' }, `#${d.id} · ${d.room} · expires ${when(d.expiresAtMs)}`), text,
      h('div', { class: 'row' },
        h('button', { id: `draft-save-${d.id}`, onclick: act('', {}) }, 'Save'),
        h('button', { id: `draft-approve-${d.id}`, onclick: act('/approve', { method: 'POST' }) }, 'Approve'),
        h('button', { id: `draft-reject-${d.id}`, class: 'danger', onclick: act('/reject', { method: 'POST' }) }, 'Reject')));
  };

  const refreshDrafts = async () => {
    // A draft being edited is not redrawn under the operator's cursor.
    const editing = document.activeElement;
    if (editing && editing.tagName === 'TEXTAREA' && drafts.contains(editing)) return;
    const answer = await api(`/api/agents/${enc(agent)}/posts/drafts`);
    const waiting = answer.drafts.filter((d) => d.state === 'draft');
    clear(drafts, waiting.length ? null : h('p', { class: 'muted' }, 'No drafts wait for approval.'));
    for (const d of waiting) drafts.append(draftRow(d));
  };

  const add = async () => {
    const spec = { room: room.value.trim() };
    if (every.value.trim()) spec.every = every.value.trim();
    if (at.value.trim()) spec.at = at.value.trim();
    if (zone.value.trim()) spec.timezone = zone.value.trim();
    if (prompt.value.trim()) spec.prompt = prompt.value.trim();
    if (approve.checked) spec.approve = true;
    try {
      await api(`/api/agents/${enc(agent)}/posts`, { method: 'POST', json: spec });
      refresh();
    } catch (e) { clear(problem, errorBox(e)); }
  };

  root.append(
    h('div', { class: 'row' }, 'Persona ', chosen.picker),
    h('section', { class: 'card' }, h('h2', {}, 'Schedules'), schedules,
      h('div', { class: 'row' }, room, every, at, zone, prompt,
        h('label', {}, approve, ' approve each post'), h('button', { id: 'post-add', onclick: add }, 'Add schedule')), problem),
    h('section', { class: 'card' }, h('h2', {}, 'Drafts waiting for approval'), drafts),
    h('section', { class: 'card' }, h('h2', {}, 'Recent posts'), recent));
  await refresh();
  const timer = setInterval(refresh, 15000);
  return () => clearInterval(timer);
}
