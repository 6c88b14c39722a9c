// Health: /readyz (database, bus, connectors) and the key series of /metrics, polled every
// two seconds and drawn as small live charts: messages in and out, decisions, model
// latency and bus depth. Counters are shown as the rate since the previous poll.

import { api } from './api.js';
import { h, clear, errorBox } from './dom.js';
import { Spark } from './chart.js';

const EVERY_MS = 2000;

// Prometheus text format: `name{labels} value` lines; sums over labels by name, and keeps
// the labelled values too (`decisions` by decision).
export function parseMetrics(text) {
  const sums = new Map();
  const labelled = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!m) continue;
    const value = Number(m[3]);
    if (!Number.isFinite(value)) continue;
    sums.set(m[1], (sums.get(m[1]) || 0) + value);
    labelled.push({ name: m[1], labels: m[2] || '', value });
  }
  return { sums, labelled };
}

export async function render(root) {
  root.append(h('h1', {}, 'Health'));
  const ready = h('section', { class: 'card', id: 'readiness' });
  const charts = {
    in: new Spark('Messages in', '/s'),
    out: new Spark('Messages out', '/s'),
    responded: new Spark('Replies decided', '/s'),
    ignored: new Spark('Ignored or limited', '/s'),
    latency: new Spark('Model latency (mean)', 'ms'),
    depth: new Spark('Bus depth', 'messages'),
  };
  const status = h('p', { class: 'muted', id: 'metrics-status' });
  root.append(ready, h('div', { class: 'charts', id: 'charts' }, Object.values(charts).map((c) => c.el)), status);

  let last = null;
  const poll = async () => {
    try {
      const r = await fetch('/readyz').then((x) => x.json());
      clear(ready, h('h2', {}, 'Readiness: ', h('span', { class: r.status === 'ready' ? 'ok' : 'error' }, r.status)),
        h('table', {},
          h('tr', {}, h('td', {}, 'database'), h('td', {}, r.database.status, r.database.backend ? ` (${r.database.backend})` : '', r.database.detail ? ` ${r.database.detail}` : '')),
          h('tr', {}, h('td', {}, 'bus'), h('td', {}, r.bus.status, r.bus.kind ? ` (${r.bus.kind}, depth ${r.bus.depth ?? '?'})` : '', r.bus.detail ? ` ${r.bus.detail}` : '')),
          Object.entries(r.connectors || {}).map(([name, c]) => h('tr', {}, h('td', {}, name), h('td', { class: c.status === 'error' ? 'error' : '' }, c.status, c.detail ? `: ${c.detail}` : '')))));
    } catch (e) { clear(ready, errorBox(e)); }
    try {
      const text = await api('/metrics');
      const now = { at: performance.now(), ...parseMetrics(text) };
      const pick = (name, label) => now.labelled.filter((x) => x.name === name && x.labels.includes(label)).reduce((s, x) => s + x.value, 0);
      const series = {
        in: now.sums.get('troupe_messages_in_total') || 0,
        out: now.sums.get('troupe_messages_out_total') || 0,
        responded: pick('troupe_decisions_total', 'decision="responded"'),
        ignored: (now.sums.get('troupe_decisions_total') || 0) - pick('troupe_decisions_total', 'decision="responded"'),
        latencySum: now.sums.get('troupe_model_latency_seconds_sum') || 0,
        latencyCount: now.sums.get('troupe_model_latency_seconds_count') || 0,
      };
      if (last) {
        const secs = Math.max((now.at - last.at) / 1000, 0.001);
        for (const key of ['in', 'out', 'responded', 'ignored']) charts[key].push((series[key] - last.series[key]) / secs);
        const calls = series.latencyCount - last.series.latencyCount;
        // No model call since the last poll: no latency to show (drawn at 0, labelled –).
        charts.latency.push(calls > 0 ? ((series.latencySum - last.series.latencySum) / calls) * 1000 : NaN);
      }
      charts.depth.push(now.sums.get('troupe_bus_depth') || 0);
      last = { at: now.at, series };
      status.textContent = `Updated ${new Date().toLocaleTimeString()}.`;
    } catch (e) { clear(status, errorBox(e)); }
  };
  await poll();
  const timer = setInterval(poll, EVERY_MS);
  return () => clearInterval(timer);
}
