// Every call the console makes: JSON over fetch (uploads over XHR, for progress), with the
// API token from this tab's sessionStorage. A 401 asks for the token once and retries.

const KEY = 'troupe.apiToken';

export function token() { return sessionStorage.getItem(KEY); }
export function forgetToken() { sessionStorage.removeItem(KEY); }

let asking = null;
function askToken(refused) {
  if (asking) return asking;
  const dialog = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  document.getElementById('token-error').hidden = !refused;
  asking = new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      const value = input.value.trim();
      input.value = '';
      if (value) sessionStorage.setItem(KEY, value);
      asking = null;
      resolve(Boolean(value));
    }, { once: true });
    dialog.showModal();
    input.focus();
  });
  return asking;
}

function headers(extra = {}) {
  const h = { ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

// A refused call, with the API's `{error, detail}` (the code, and what to do) when it sent one.
export class ApiError extends Error {
  constructor(status, body) {
    const { error, detail } = body && typeof body === 'object' ? body : {};
    super(error && detail ? `${error}: ${detail}` : detail || error || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function parse(response) {
  const text = await response.text();
  if (!text) return null;
  const type = response.headers.get('content-type') || '';
  return type.includes('json') ? JSON.parse(text) : text;
}

// `api('/api/agents')`, `api(path, {method: 'POST', json: {...}})`; `signal` aborts it.
export async function api(path, options = {}, retried = false) {
  const init = { method: options.method || 'GET', headers: headers(options.headers), signal: options.signal };
  if (options.json !== undefined) {
    init.body = JSON.stringify(options.json);
    init.headers['Content-Type'] = 'application/json';
  }
  const response = await fetch(path, init);
  if (response.status === 401 && !retried) {
    if (await askToken(Boolean(token()))) return api(path, options, true);
  }
  const body = await parse(response);
  if (!response.ok) throw new ApiError(response.status, body);
  document.getElementById('forget-token').hidden = !token();
  return body;
}

// Multipart upload with progress: `onProgress(loaded, total)`.
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', path);
    const t = token();
    if (t) xhr.setRequestHeader('Authorization', `Bearer ${t}`);
    xhr.upload.addEventListener('progress', (e) => onProgress(e.loaded, e.lengthComputable ? e.total : 0));
    xhr.addEventListener('load', () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { body = null; }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body);
      else reject(new ApiError(xhr.status, body));
    });
    xhr.addEventListener('error', () => reject(new Error('the upload failed (network)')));
    xhr.send(form);
  });
}

// What a call made by `latest()` resolves to when a newer call replaced it.
export const STALE = Symbol('stale');

// For a series of calls where only the newest answer counts (search as you type, the
// draft check): `const search = latest(); const answer = await search(path);` Each call
// aborts the one before, and an answer (or error) that arrives after a newer call started
// resolves to `STALE` instead, so a slow early answer never overwrites a later one.
// `search.cancel()` drops the call in flight (the query was emptied).
export function latest() {
  let current = null;
  const call = async (path, options = {}) => {
    if (current) current.abort();
    const mine = new AbortController();
    current = mine;
    try {
      const body = await api(path, { ...options, signal: mine.signal });
      return mine.signal.aborted ? STALE : body;
    } catch (e) {
      if (mine.signal.aborted) return STALE;
      throw e;
    }
  };
  call.cancel = () => { if (current) current.abort(); current = null; };
  return call;
}

let agentsCache = null;
export async function agents(fresh = false) {
  if (!agentsCache || fresh) agentsCache = (await api('/api/agents')).agents;
  return agentsCache;
}

export const enc = encodeURIComponent;

// A message id the gateway can dedupe on (crypto.randomUUID needs a secure context).
export function newId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// An image the API serves behind the token (a room's history), as a `data:` URL: an `<img>`
// cannot send the token, and the console's Content-Security-Policy takes images from the
// console's own origin and `data:` only.
export async function imageData(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw new ApiError(response.status, await parse(response));
  const blob = await response.blob();
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}
