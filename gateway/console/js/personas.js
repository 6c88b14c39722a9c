// Personas: each persona's model, whether its provider is configured, how its knowledge is
// searched (hybrid or keywords, the embedding model, chunks with vectors), and each platform's
// connector: its state from /readyz (ok, standby on another replica, error with the last
// error), or the variable to set; with the Discord invite, Telegram and Farcaster links.
// Tokens today come from spend accounting (`GET …/usage`, docs/spend.md).

import { api, agents, enc } from './api.js';
import { h, clear, errorBox } from './dom.js';

function connectorState(ready, agentId, setup) {
  const check = ready && ready.connectors ? ready.connectors[`${agentId}/${setup.platform}`] : null;
  if (!setup.tokenSet) return h('span', { class: 'pill warn' }, `not configured: set ${setup.tokenVar}`);
  if (!check) return h('span', { class: 'pill warn' }, 'configured, not running');
  if (check.status === 'ok') return h('span', { class: 'pill ok' }, 'connected');
  if (check.status === 'standby') return h('span', { class: 'pill' }, 'standby (another replica leads)');
  return h('span', { class: 'pill error' }, `error: ${check.detail || check.status}`);
}

function links(setup) {
  const out = [];
  if (setup.inviteUrl) out.push(h('a', { href: setup.inviteUrl, target: '_blank', rel: 'noopener' }, 'Add to Discord'));
  if (setup.profileUrl) out.push(h('a', { href: setup.profileUrl, target: '_blank', rel: 'noopener' }, 'Farcaster account'));
  if (setup.botUrl) out.push(h('a', { href: setup.botUrl, target: '_blank', rel: 'noopener' }, setup.botUrl.replace('https://', '')));
  else if (setup.platform === 'telegram') out.push(h('a', { href: 'https://t.me/BotFather', target: '_blank', rel: 'noopener' }, 'BotFather'));
  if (setup.hint) out.push(h('div', { class: 'muted' }, setup.hint));
  return out;
}

async function usageToday(agent) {
  // Spend accounting (docs/spend.md): today's rollup, UTC like the budgets.
  const since = new Date().toISOString().slice(0, 10);
  try {
    const u = await api(`/api/agents/${enc(agent.id)}/usage?by=day&since=${since}`);
    return u && u.total ? { total: u.total, persona: u.persona } : null;
  } catch { return null; }
}

// How the persona's knowledge is searched (GET /api/agents/{id}): the embedding model and
// its size, how many chunks have vectors, and whether search is hybrid or keywords only.
async function knowledgeRow(agent) {
  let k;
  try { k = (await api(`/api/agents/${enc(agent.id)}`)).knowledge; } catch { return null; }
  if (!k) return null;
  const counts = `${k.chunksWithVectors} of ${k.chunks} chunks have vectors`;
  if (!k.hybrid) {
    return h('div', { class: 'row knowledge' }, 'Knowledge: ', h('span', { class: 'pill warn' }, 'keywords only'), ' ',
      h('span', { class: 'muted' }, k.whyNot || ''));
  }
  const size = k.dimensions ? `, ${k.dimensions} dimensions` : '';
  return h('div', { class: 'row knowledge' }, 'Knowledge: ', h('span', { class: 'pill ok' }, 'hybrid'), ' ',
    h('code', {}, k.model), h('span', { class: 'muted' }, `${size}; ${counts}`));
}

export async function render(root) {
  root.append(h('h1', {}, 'Personas'));
  // /readyz checks every connector (up to seconds on a slow platform): the cards draw
  // without it, and the connector cells fill in when it answers.
  const ready = fetch('/readyz').then((r) => r.json()).catch(() => null);
  const list = await agents(true);
  if (!list.length) { root.append(h('p', { class: 'muted' }, 'No persona is loaded: add a character file (see Characters).')); return; }
  const grid = h('div', { class: 'grid' });
  root.append(grid);
  const setups = await Promise.all(list.map((agent) => api(`/api/agents/${enc(agent.id)}/setup`).catch((e) => e)));
  list.forEach((agent, i) => {
    const card = h('section', { class: 'card persona', dataset: { agent: agent.id } },
      h('h2', {}, agent.name, ' ', h('span', { class: 'muted' }, agent.id)),
      h('div', { class: 'row' }, 'Model: ', h('code', {}, agent.model), ' ',
        agent.modelConfigured ? h('span', { class: 'pill ok' }, 'provider configured') : h('span', { class: 'pill error' }, 'provider not configured')),
      agent.source ? h('div', { class: 'muted' }, 'File: ', agent.source) : null);
    grid.append(card);
    knowledgeRow(agent).then((row) => { if (row) card.insertBefore(row, card.children[2] || null); });
    const setup = setups[i];
    if (setup instanceof Error) { card.append(errorBox(setup)); return; }
    const table = h('table', {}, h('tr', {}, h('th', {}, 'Platform'), h('th', {}, 'Connector'), h('th', {}, 'Links')));
    card.append(table);
    for (const p of setup.platforms) {
      const state = h('td', { class: 'connector' }, p.tokenSet ? h('span', { class: 'pill' }, 'checking…') : connectorState(null, agent.id, p));
      if (p.tokenSet) ready.then((r) => clear(state, connectorState(r, agent.id, p)));
      table.append(h('tr', { dataset: { platform: p.platform } }, h('td', {}, p.platform), state, h('td', {}, links(p))));
    }
    table.append(h('tr', {}, h('td', {}, 'web'), h('td', {}, h('span', { class: 'pill ok' }, 'HTTP API')), h('td', {}, h('a', { href: `#/chat?agent=${enc(agent.id)}` }, 'Chat'))));
    usageToday(agent).then((usage) => {
      if (!usage) return;
      const { total, persona } = usage;
      let text = `Today: ${total.calls} model calls, ${total.tokens} tokens, $${Number(total.costUsd || 0).toFixed(4)}`;
      const left = [];
      for (const [label, s] of [['today', persona && persona.day], ['this month', persona && persona.month]]) {
        if (!s) continue;
        if (s.tokensLeft != null) left.push(`${s.tokensLeft} tokens left ${label}`);
        if (s.microsLeft != null) left.push(`$${(s.microsLeft / 1e6).toFixed(4)} left ${label}`);
      }
      if (left.length) text += ` (${left.join(', ')})`;
      card.append(h('div', { class: 'muted usage' }, text));
    });
  });
}
