// Rooms: every room a persona has talked in, on any platform, with its recent messages,
// its summary and the facts learned about its users. A fact can be deleted here.
// Forget, mute and follow come with room commands (issue 15): see the marked slot below.

import { api, agents, enc } from './api.js';
import { h, clear, errorBox, when, agentPicker } from './dom.js';
import { setParam } from './app.js';

async function showRoom(panel, agent, room) {
  clear(panel, h('p', { class: 'muted' }, 'Loading…'));
  const base = `/api/agents/${enc(agent)}/rooms/${enc(room)}`;
  const [memories, facts] = await Promise.all([api(`${base}/memories?limit=50`), api(`${base}/facts`)]);
  const factList = h('table', { id: 'facts' }, h('tr', {}, h('th', {}, 'User'), h('th', {}, 'Fact'), h('th', {}, 'Learned'), h('th', {})));
  for (const f of facts.facts) {
    const row = h('tr', { dataset: { fact: f.id } },
      h('td', {}, f.userName), h('td', { class: 'fact-text' }, f.fact), h('td', { class: 'muted' }, when(f.createdAtMs)),
      h('td', {}, h('button', {
        class: 'danger', 'aria-label': `delete fact ${f.id}`,
        onclick: async (e) => {
          e.target.disabled = true;
          try { await api(`/api/agents/${enc(agent)}/facts/${f.id}`, { method: 'DELETE' }); row.remove(); } catch (err) { row.after(h('tr', {}, h('td', { colspan: 4 }, errorBox(err)))); }
        },
      }, 'Delete')));
    factList.append(row);
  }
  clear(panel,
    h('h2', {}, room),
    h('section', { class: 'slot', id: 'room-controls', dataset: { slot: 'room-controls' } },
      h('strong', {}, 'Room controls'), ' ',
      h('span', { class: 'muted' }, 'Forget, mute and follow arrive with room commands (issue 15, POST …/rooms/{room}/commands).')),
    h('h3', {}, 'Summary'),
    memories.summary ? h('p', { id: 'summary' }, memories.summary.text) : h('p', { class: 'muted' }, 'No summary yet (the room has not outgrown its window).'),
    h('h3', {}, `Facts (${facts.facts.length})`),
    facts.facts.length ? factList : h('p', { class: 'muted', id: 'no-facts' }, 'No facts about the people here.'),
    h('h3', {}, 'Recent messages'),
    h('div', { class: 'log' }, memories.messages.map((m) => h('div', { class: m.fromAgent ? 'msg agent' : 'msg user' },
      h('div', { class: 'who' }, `${m.authorName} · ${when(m.createdAtMs)}`), m.text))));
}

export async function render(root, params) {
  const list = await agents();
  root.append(h('h1', {}, 'Rooms'));
  if (!list.length) { root.append(h('p', { class: 'muted' }, 'No persona is loaded.')); return; }
  let agent = list.find((a) => a.id === params.get('agent')) ? params.get('agent') : list[0].id;
  const rooms = h('table', { id: 'rooms' });
  const panel = h('section', { class: 'card', id: 'room' }, h('p', { class: 'muted' }, 'Pick a room.'));
  const load = async () => {
    clear(rooms, h('tr', {}, h('th', {}, 'Room'), h('th', {}, 'Platform'), h('th', {}, 'Messages'), h('th', {}, 'Last active')));
    try {
      const answer = await api(`/api/agents/${enc(agent)}/rooms`);
      if (!answer.rooms.length) rooms.append(h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No room yet: chat with the persona first.')));
      for (const r of answer.rooms) {
        rooms.append(h('tr', { dataset: { room: r.room } },
          h('td', {}, h('a', { href: '#', onclick: (e) => { e.preventDefault(); setParam('room', r.room); showRoom(panel, agent, r.room).catch((err) => clear(panel, errorBox(err))); } }, r.name || r.room)),
          h('td', {}, r.platform), h('td', {}, r.messageCount), h('td', { class: 'muted' }, when(r.lastActiveMs))));
      }
    } catch (err) { rooms.append(h('tr', {}, h('td', {}, errorBox(err)))); }
  };
  root.append(h('div', { class: 'row' }, 'Persona ', agentPicker(list, agent, (v) => { agent = v; setParam('agent', v); setParam('room', ''); load(); })),
    h('div', { class: 'cols' }, h('section', { class: 'card' }, rooms), panel));
  await load();
  if (params.get('room')) await showRoom(panel, agent, params.get('room')).catch((err) => clear(panel, errorBox(err)));
}
