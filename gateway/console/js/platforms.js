// Platforms: connect a persona to Discord, Telegram or Farcaster from the page (issue 47;
// docs/console.md, "Platforms"). Paste the token → troupe checks it with the platform →
// the account's name and the next steps are shown, and the connector runs at once. Each
// key says where it comes from (environment, secrets file, character file) and shows only
// its last 4 characters; the token field is emptied whatever the answer.

import { api, enc } from './api.js';
import { h, clear, errorBox } from './dom.js';
import { choosePersona } from './picker.js';

const NAMES = { discord: 'Discord', telegram: 'Telegram', farcaster: 'Farcaster' };
const CREDENTIALS = { discord: 'DISCORD_API_TOKEN', telegram: 'TELEGRAM_BOT_TOKEN', farcaster: 'FARCASTER_NEYNAR_API_KEY' };
const ORIGINS = { env: 'environment', secretsFile: 'secrets file', characterFile: 'character file' };

// Where each platform's token is found, for the paste box's hint.
const HINTS = {
  discord: 'Bot token: Developer Portal → your application → Bot → Reset Token',
  telegram: 'Bot token: talk to @BotFather → /newbot (or /mybots → API Token)',
  farcaster: 'Neynar API key (dashboard.neynar.com), with the account’s fid and a managed signer',
};

function keysList(keys) {
  if (!keys.length) return h('p', { class: 'muted' }, 'Not connected.');
  return h('ul', { class: 'keys' }, keys.map((k) => h('li', { dataset: { key: k.key, origin: k.origin } },
    h('code', {}, k.key), ` ${k.shown} · from the ${ORIGINS[k.origin] || k.origin}`, h('span', { class: 'muted' }, ` (${k.from})`))));
}

function nextSteps(account) {
  const next = account.nextSteps || {};
  return h('div', { class: 'next-steps' },
    next.inviteUrl && h('p', {}, h('a', { href: next.inviteUrl, target: '_blank', rel: 'noopener', id: 'invite-url' }, 'Invite the bot to a server')),
    next.botUrl && h('p', {}, h('a', { href: next.botUrl, target: '_blank', rel: 'noopener' }, next.botUrl)),
    next.privacyMode !== undefined && h('p', { id: 'privacy-mode' }, next.privacyMode ? 'Privacy mode: on' : 'Privacy mode: off'),
    next.signer && h('p', { id: 'signer-state' }, `Signer: ${next.signer.replace('_', ' ')}`),
    h('ol', {}, (next.steps || []).map((s) => h('li', {}, s))));
}

export async function render(root, params) {
  root.append(h('h1', {}, 'Platforms'));
  const chosen = await choosePersona(root, params, (v) => { agent = v; refresh(); });
  if (!chosen) return;
  let { agent } = chosen;
  const cards = h('div', { id: 'platforms' });
  const fileNote = h('p', { class: 'muted', id: 'secrets-file' });

  const card = (p, fileRefused) => {
    const name = p.platform;
    const token = h('input', { id: `token-${name}`, type: 'password', autocomplete: 'off', size: 40,
      placeholder: HINTS[name], 'aria-label': `${NAMES[name]} token` });
    const fid = name === 'farcaster' && h('input', { id: 'fid-farcaster', size: 8, placeholder: 'fid', 'aria-label': 'fid' });
    const signer = name === 'farcaster' && h('input', { id: 'signer-farcaster', size: 36, placeholder: 'signer UUID (optional)', 'aria-label': 'signer UUID' });
    const result = h('div', { id: `result-${name}` });
    const fromEnv = p.keys.some((k) => k.origin === 'env' && k.key === CREDENTIALS[name]);
    const check = async () => {
      const json = { token: token.value.trim() };
      if (fid) json.fid = fid.value.trim();
      if (signer && signer.value.trim()) json.signerUuid = signer.value.trim();
      token.value = '';
      clear(result, h('p', { class: 'muted' }, 'Checking with ' + NAMES[name] + '…'));
      try {
        const answer = await api(`/api/agents/${enc(agent)}/platforms/${name}`, { method: 'PUT', json });
        clear(result, h('p', { class: 'ok', id: `account-${name}` }, `Connected as ${answer.account.name}`,
          answer.account.username ? ` (@${answer.account.username})` : ''), nextSteps(answer.account));
        await refresh(false);
      } catch (e) { clear(result, errorBox(e)); }
    };
    const disconnect = async () => {
      try {
        await api(`/api/agents/${enc(agent)}/platforms/${name}`, { method: 'DELETE' });
        clear(result, h('p', { class: 'muted', id: `disconnected-${name}` }, 'Disconnected.'));
        await refresh(false);
      } catch (e) { clear(result, errorBox(e)); }
    };
    const stored = p.keys.some((k) => k.origin === 'secretsFile');
    const state = p.running ? 'running' : p.connected ? 'connected, not running' : 'not connected';
    return h('section', { class: 'card', dataset: { platform: name, state } },
      h('h2', {}, NAMES[name], h('span', { class: 'muted', id: `state-${name}` }, ` · ${state}`)),
      keysList(p.keys),
      p.withheld && h('p', { class: 'error' }, p.withheld),
      fromEnv ? h('p', { class: 'muted' }, 'Set in the environment, which wins over the console.')
        : h('div', { class: 'row' }, token, fid, signer,
          h('button', { id: `check-${name}`, disabled: Boolean(fileRefused), onclick: check }, 'Check and connect'),
          stored && h('button', { id: `disconnect-${name}`, class: 'danger', onclick: disconnect }, 'Disconnect')),
      result);
  };

  // A redraw after a check (`wipe` false) keeps the answer shown under each card.
  const results = new Map();
  const refresh = async (wipe = true) => {
    try {
      const answer = await api(`/api/agents/${enc(agent)}/platforms`);
      for (const el of cards.querySelectorAll('[id^="result-"]')) if (!wipe) results.set(el.id, [...el.childNodes]);
      clear(cards, answer.platforms.map((p) => card(p, answer.secretsFile.refused)));
      for (const [id, nodes] of results) { const el = cards.querySelector(`#${id}`); if (el) el.append(...nodes); }
      results.clear();
      clear(fileNote, answer.secretsFile.refused ? h('span', { class: 'error' }, answer.secretsFile.refused)
        : `Tokens connected here are kept in ${answer.secretsFile.path} (mode 0600), never in the character file. The environment wins over them.`);
    } catch (e) { clear(cards, errorBox(e)); }
  };

  root.append(h('div', { class: 'row' }, 'Persona ', chosen.picker), fileNote, cards);
  await refresh();
}
