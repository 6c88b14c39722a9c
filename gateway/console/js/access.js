// Access: who may talk to the personas (docs/access.md). The pairing codes waiting, with an
// Approve button each, the people approved, with Revoke, and the group rooms that were
// refused lately (asking to be let in). Everything goes through /api/pairing.

import { api, enc } from './api.js';
import { h, clear, errorBox, when } from './dom.js';

export async function render(root) {
  root.append(h('h1', {}, 'Access'));
  const pending = h('table', { id: 'pairing-pending' });
  const approved = h('table', { id: 'pairing-approved' });
  const asking = h('table', { id: 'pairing-asking' });
  const problem = h('div', {});
  const code = h('input', { id: 'pairing-code', placeholder: 'ABCD2345', size: 10, 'aria-label': 'code' });

  const approve = async (value) => {
    try {
      await api('/api/pairing/approve', { method: 'POST', json: { code: value } });
      code.value = '';
      refresh();
    } catch (e) { clear(problem, errorBox(e)); }
  };

  const refresh = async () => {
    clear(problem);
    clear(pending, h('tr', {}, h('th', {}, 'Code'), h('th', {}, 'Persona'), h('th', {}, 'Who'), h('th', {}, 'Asked'), h('th', {}, 'Expires'), h('th', {})));
    clear(approved, h('tr', {}, h('th', {}, 'Persona'), h('th', {}, 'Who'), h('th', {}, 'Approved by'), h('th', {}, 'When'), h('th', {})));
    clear(asking, h('tr', {}, h('th', {}, 'Persona'), h('th', {}, 'Room'), h('th', {}, 'Messages'), h('th', {}, 'Last')));
    try {
      const answer = await api('/api/pairing');
      if (!answer.pending.length) pending.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No code is waiting.')));
      for (const p of answer.pending) {
        pending.append(h('tr', { dataset: { code: p.code } }, h('td', {}, p.code), h('td', {}, p.agentId),
          h('td', {}, `${p.platform}:${p.userId} (${p.userName})`), h('td', { class: 'muted' }, when(p.createdAtMs)),
          h('td', { class: 'muted' }, when(p.expiresAtMs)), h('td', {}, h('button', { onclick: () => approve(p.code) }, 'Approve'))));
      }
      if (!answer.approved.length) approved.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'Nobody approved yet.')));
      for (const a of answer.approved) {
        const [platform, ...user] = a.subject.split(':');
        const revoke = h('button', { class: 'danger', onclick: async () => {
          try { await api(`/api/pairing/${enc(platform)}/${enc(user.join(':'))}`, { method: 'DELETE' }); refresh(); } catch (e) { clear(problem, errorBox(e)); }
        } }, 'Revoke');
        approved.append(h('tr', { dataset: { subject: a.subject } }, h('td', {}, a.agentId), h('td', {}, `${a.subject} (${a.userName})`),
          h('td', {}, a.approvedBy), h('td', { class: 'muted' }, when(a.approvedAtMs)), h('td', {}, revoke)));
      }
      if (!answer.asking.length) asking.append(h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No group was refused lately.')));
      for (const r of answer.asking) {
        asking.append(h('tr', {}, h('td', {}, r.agentId), h('td', {}, r.name ? `${r.room} (${r.name})` : r.room),
          h('td', {}, String(r.messages)), h('td', { class: 'muted' }, when(r.lastMs))));
      }
    } catch (e) { clear(problem, errorBox(e)); }
  };

  root.append(
    h('section', { class: 'card' }, h('h2', {}, 'Pairing codes waiting'), pending,
      h('div', { class: 'row' }, code, h('button', { id: 'pairing-approve', onclick: () => approve(code.value.trim()) }, 'Approve code')), problem),
    h('section', { class: 'card' }, h('h2', {}, 'Approved'), approved),
    h('section', { class: 'card' }, h('h2', {}, 'Groups asking to be let in'), asking));
  await refresh();
  const timer = setInterval(refresh, 15000);
  return () => clearInterval(timer);
}
