// Chat: talk to a persona in a room of the HTTP API, through POST /messages, the same route
// any client uses. Each reply gets a "why" panel: the summary, facts, recent messages and
// knowledge passages (with sources, and each one's rank among them) its prompt was
// composed from.

import { api, enc, newId } from './api.js';
import { h, clear, errorBox, relevance } from './dom.js';
import { setParam } from './route.js';
import { choosePersona } from './picker.js';

function whyPanel(why) {
  const part = (p) => h('li', { class: p.inPrompt ? '' : 'muted' }, p.text, p.inPrompt ? '' : ' (left out: over the prompt budget)');
  const scores = why.knowledge.map((k) => k.score);
  return [
    h('h3', {}, 'Knowledge'),
    why.knowledge.length
      ? why.knowledge.map((k, i) => h('div', { class: k.inPrompt ? 'passage' : 'passage dropped', dataset: { source: k.source } },
        h('div', {}, h('strong', {}, k.source), ' ', relevance(scores, i), k.inPrompt ? '' : h('span', { class: 'muted' }, ' (left out)')),
        h('pre', {}, k.text)))
      : h('p', { class: 'muted' }, 'No passage was recalled.'),
    h('h3', {}, 'Summary'),
    why.summary ? h('ul', {}, part(why.summary)) : h('p', { class: 'muted' }, 'No room summary yet.'),
    h('h3', {}, 'Facts about the sender'),
    why.facts.length ? h('ul', { class: 'facts' }, why.facts.map(part)) : h('p', { class: 'muted' }, 'No facts.'),
    h('h3', {}, `Recent messages (${why.history.length})`),
    h('ul', {}, why.history.map((m) => h('li', { class: m.inPrompt ? '' : 'muted' }, h('strong', {}, m.authorName, ': '), m.text))),
    h('p', { class: 'muted' }, `Prompt: ${why.promptChars} characters.`),
    // 👍/👎 people put on the reply on Discord or Telegram (docs/media.md).
    why.feedback ? h('p', { class: 'feedback' }, `Feedback: 👍 ${why.feedback.up} · 👎 ${why.feedback.down}`) : null,
  ];
}

export async function render(root, params) {
  root.append(h('h1', {}, 'Chat'));
  const log = h('div', { class: 'log', id: 'log', 'aria-live': 'polite' });
  const chosen = await choosePersona(root, params, (v) => { agent = v; clear(log); });
  if (!chosen) return;
  let { agent } = chosen;
  const room = h('input', { id: 'room', value: params.get('room') || 'console', 'aria-label': 'room', size: 14 });
  const user = h('input', { id: 'user', value: 'console-user', 'aria-label': 'user id', size: 14 });
  const text = h('input', { id: 'text', placeholder: 'Say something…', autocomplete: 'off', size: 60 });
  const send = h('button', { id: 'send', type: 'submit' }, 'Send');
  const form = h('form', { class: 'row', id: 'chat-form' }, text, send);
  root.append(
    h('div', { class: 'row' }, 'Persona ', chosen.picker, ' Room ', room, ' User ', user),
    h('section', { class: 'card' }, log, form));
  room.addEventListener('change', () => { setParam('room', room.value); clear(log); });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const message = text.value.trim();
    if (!message) return;
    text.value = '';
    send.disabled = true;
    log.append(h('div', { class: 'msg user' }, h('div', { class: 'who' }, user.value), message));
    const messageId = newId();
    try {
      const answer = await api(`/api/agents/${enc(agent)}/messages`, {
        method: 'POST',
        json: { roomId: room.value, userId: user.value, userName: user.value, text: message, messageId },
      });
      if (!answer.replies.length) log.append(h('div', { class: 'msg agent muted' }, `(no reply: ${answer.ignored || 'none'})`));
      for (const reply of answer.replies) {
        const why = h('details', { class: 'why', open: true }, h('summary', {}, 'Why this reply'), h('p', { class: 'muted' }, 'Loading…'));
        log.append(h('div', { class: 'msg agent reply' }, h('div', { class: 'who' }, agent), h('div', { class: 'text' }, reply.text), why));
        api(`/api/agents/${enc(agent)}/rooms/${enc(answer.roomId)}/messages/${enc(answer.messageId)}/why`)
          .then((w) => clear(why, h('summary', {}, 'Why this reply'), whyPanel(w)))
          .catch((err) => clear(why, h('summary', {}, 'Why this reply'), errorBox(err)));
        break; // one panel per answer: every part of a split reply shares the prompt
      }
      for (const extra of answer.replies.slice(1)) log.append(h('div', { class: 'msg agent reply' }, h('div', { class: 'text' }, extra.text)));
    } catch (err) {
      log.append(errorBox(err));
    } finally {
      send.disabled = false;
      log.scrollTop = log.scrollHeight;
      text.focus();
    }
  });
  text.focus();
}
