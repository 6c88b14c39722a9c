// Where the console is: the page and its parameters, read from and written to the URL hash
// (`#/chat?agent=eliza&room=console`). Its own module so that the shell (app.js) and the
// pages both import it without importing each other.

// The pages the shell knows; an unknown or empty hash shows the first.
export const PAGES = ['personas', 'chat', 'rooms', 'knowledge', 'posts', 'access', 'platforms', 'characters', 'health'];

export function route() {
  const [name, query] = location.hash.replace(/^#\/?/, '').split('?');
  const page = PAGES.includes(name) ? name : PAGES[0];
  return { page, params: new URLSearchParams(query || '') };
}

// Changes one parameter of the current page without redrawing it.
export function setParam(key, value) {
  const { page, params } = route();
  if (value) params.set(key, value); else params.delete(key);
  history.replaceState(null, '', `#/${page}?${params}`);
}
