// Rooms: every room a persona has talked in, on any platform, with its recent messages, its
// summary and the facts learned about its users, and the persona's linked accounts. A fact can
// be deleted here, and the room steered (mute, follow, forget) through the same commands
// people type in the chat (`POST …/rooms/{room}/commands`, docs/rooms.md). The history shows a
// voice note's transcript marked as one, the images posted with a message (fetched behind the
// token from the gateway's own store, never from a link a stranger chose), and the 👍/👎 on the
// persona's replies (docs/console.md).

import { api, enc, imageData } from './api.js';
import { h, clear, errorBox, when } from './dom.js';
import { setParam } from './route.js';
import { choosePersona } from './picker.js';

// The room's controls: each button runs one chat command as the operator, then the room is
// drawn again so its summary and messages show the effect (a forget empties them).
function controls(panel, agent, room, base) {
  const status = h('span', { class: 'muted', id: 'room-command-reply' });
  const run = (command, confirmText) => async (e) => {
    if (confirmText && !window.confirm(confirmText)) return;
    e.target.disabled = true;
    try {
      const answer = await api(`${base}/commands`, { method: 'POST', json: { command } });
      await showRoom(panel, agent, room);
      const line = document.getElementById('room-command-reply');
      if (line) line.textContent = answer.reply;
    } catch (err) { status.replaceChildren(errorBox(err)); e.target.disabled = false; }
  };
  const button = (label, command, confirmText) =>
    h('button', { dataset: { command }, onclick: run(command, confirmText) }, label);
  return h('section', { class: 'slot', id: 'room-controls' },
    h('strong', {}, 'Room controls'), ' ',
    button('Mute 1 h', '/mute 1h'), ' ', button('Unmute', '/unmute'), ' ',
    button('Follow', '/follow'), ' ', button('Unfollow', '/unfollow'), ' ',
    button('Forget this room', '/forget', 'Forget this room\'s recent messages and summary?'), ' ',
    status);
}

const HEARD = '[voice, transcribed]';

// One message of the history, with its extras.
function messageView(m, base) {
  const transcript = m.transcribed ? m.text.slice(HEARD.length).trimStart() : m.text;
  const images = (m.images || []).map((img) => {
    const el = h('img', { class: 'thumb', alt: `image ${img.n + 1} (${img.mime || 'image'})` });
    imageData(`${base}/history/${m.id}/images/${img.n}`)
      .then((url) => { el.src = url; })
      .catch(() => el.replaceWith(h('span', { class: 'muted' }, '(image not available)')));
    return h('div', {}, el);
  });
  return h('div', { class: m.fromAgent ? 'msg agent' : 'msg user', dataset: { message: m.id } },
    h('div', { class: 'who' }, `${m.authorName} · ${when(m.createdAtMs)}`),
    m.transcribed ? h('span', { class: 'badge transcribed', title: 'a voice note, transcribed' }, '🎤 transcribed') : null,
    m.transcribed ? ' ' : null,
    transcript,
    images,
    m.feedback ? h('div', { class: 'feedback', title: 'reactions on this reply' }, `👍 ${m.feedback.up} · 👎 ${m.feedback.down}`) : null);
}

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
    controls(panel, agent, room, base),
    h('h3', {}, 'Summary'),
    memories.summary ? h('p', { id: 'summary' }, memories.summary.text) : h('p', { class: 'muted' }, 'No summary yet (the room has not outgrown its window).'),
    h('h3', {}, `Facts (${facts.facts.length})`),
    facts.facts.length ? factList : h('p', { class: 'muted', id: 'no-facts' }, 'No facts about the people here.'),
    h('h3', {}, 'Recent messages'),
    h('div', { class: 'log' }, memories.messages.map((m) => messageView(m, base))));
}

// Accounts linked into one person with /link (docs/people.md): they share facts, one
// per-user budget, /usage and /forgetme.
async function showPeople(card, agent) {
  try {
    const answer = await api(`/api/agents/${enc(agent)}/people`);
    const account = (a) => `${a.platform}:${a.userId}${a.name ? ` (${a.name})` : ''}`;
    clear(card, h('h3', {}, `Linked accounts (${answer.people.length})`),
      answer.people.length
        ? h('ul', {}, answer.people.map((p) => h('li', { dataset: { person: p.id } }, p.accounts.map(account).join(' + '))))
        : h('p', { class: 'muted' }, 'No linked accounts: a person links theirs with /link in a direct message.'));
  } catch (err) { clear(card, errorBox(err)); }
}

export async function render(root, params) {
  root.append(h('h1', {}, 'Rooms'));
  // Another persona's rooms are others: the room parameter goes with the old one.
  const chosen = await choosePersona(root, params, (v) => { agent = v; load(); showPeople(people, agent); }, ['room']);
  if (!chosen) return;
  let { agent } = chosen;
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
  const people = h('section', { class: 'card', id: 'people' });
  root.append(h('div', { class: 'row' }, 'Persona ', chosen.picker),
    h('div', { class: 'cols' }, h('section', { class: 'card' }, rooms), panel), people);
  await Promise.all([load(), showPeople(people, agent)]);
  if (params.get('room')) await showRoom(panel, agent, params.get('room')).catch((err) => clear(panel, errorBox(err)));
}
