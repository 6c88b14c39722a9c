// The persona picker of the Chat, Rooms and Knowledge pages: the loaded personas, the one
// the URL names (else the first), and a select that remembers a new choice in the URL.

import { agents } from './api.js';
import { h } from './dom.js';
import { setParam } from './route.js';

// `null` (after saying so in `root`) when no persona is loaded. Otherwise `{agent, picker}`:
// `agent` is the chosen id; `picker` is the select, which on a change records it as the
// `agent` parameter, clears the parameters in `resets` (a room of the old persona) and
// calls `onChange(id)`.
export async function choosePersona(root, params, onChange, resets = []) {
  const list = await agents();
  if (!list.length) { root.append(h('p', { class: 'muted' }, 'No persona is loaded.')); return null; }
  const named = params.get('agent');
  const agent = list.some((a) => a.id === named) ? named : list[0].id;
  const change = (e) => {
    setParam('agent', e.target.value);
    for (const key of resets) setParam(key, '');
    onChange(e.target.value);
  };
  const picker = h('select', { 'aria-label': 'persona', id: 'agent', onchange: change },
    list.map((a) => h('option', { value: a.id, selected: a.id === agent }, `${a.name} (${a.id})`)));
  return { agent, picker };
}
