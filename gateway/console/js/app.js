// The console's shell: a hash router (`#/chat?agent=eliza`) over one module per page.
// Each page exports `render(root, params)`; it may return a function that stops its timers.
// Reading and writing the hash is route.js's, which the pages import too.
// When the first page has drawn, `document.body.dataset.ready` is set and the
// `console-interactive` performance mark is recorded (the browser tests read both).

import { forgetToken } from './api.js';
import { clear, errorBox } from './dom.js';
import { route } from './route.js';

const pages = {
  personas: () => import('./personas.js'),
  chat: () => import('./chat.js'),
  rooms: () => import('./rooms.js'),
  knowledge: () => import('./knowledge.js'),
  posts: () => import('./posts.js'),
  access: () => import('./access.js'),
  platforms: () => import('./platforms.js'),
  characters: () => import('./characters.js'),
  health: () => import('./health.js'),
};

let stop = null;
let generation = 0;

async function show() {
  const mine = ++generation;
  if (stop) { try { stop(); } catch { /* a page that cannot stop is gone anyway */ } stop = null; }
  const { page, params } = route();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
  const root = document.getElementById('page');
  document.body.dataset.page = page;
  delete document.body.dataset.ready;
  try {
    const module = await pages[page]();
    if (mine !== generation) return;
    clear(root);
    stop = (await module.render(root, params)) || null;
  } catch (e) {
    clear(root, errorBox(e));
  }
  if (mine !== generation) return;
  document.body.dataset.ready = page;
  if (!performance.getEntriesByName('console-interactive').length) performance.mark('console-interactive');
}

document.getElementById('forget-token').addEventListener('click', () => { forgetToken(); location.reload(); });
window.addEventListener('hashchange', show);
show();
