// Drives troupe's OpenAI-compatible API with the official `openai` npm package, as a user
// would. Run by tests/tests/openai_api.rs against the real binary and the fake model:
//
//     node openai_client.mjs BASE_URL TOKEN MODEL TAG
//
// It asserts what the SDK itself shows, exits non-zero on the first failure, and prints one
// JSON object of what it saw for the Rust test to check against the fake model's records.

import OpenAI from 'openai';

const [baseURL, token, model, tag] = process.argv.slice(2);
// No retries: a 429 must reach the test as the SDK's error, not be waited out.
const client = new OpenAI({ baseURL, apiKey: token, maxRetries: 0 });
const seen = {};

function check(cond, what) {
  if (!cond) {
    console.error(`FAILED: ${what}`);
    process.exit(1);
  }
}

async function main() {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  check(ids.includes(model), `models.list() has ${model}: ${ids}`);
  seen.models = ids;

  const done = await client.chat.completions.create({
    model,
    user: `${tag}-plain`,
    messages: [{ role: 'user', content: `${tag} plain: When does the harbour office close?` }],
  });
  check(done.choices[0].finish_reason === 'stop', 'finish_reason stop');
  check(done.usage.total_tokens === done.usage.prompt_tokens + done.usage.completion_tokens, 'usage adds up');
  seen.plain = { text: done.choices[0].message.content, usage: done.usage };

  const stream = await client.chat.completions.create({
    model,
    user: `${tag}-stream`,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: `${tag} stream: tell me about the tides` }],
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const last = chunks[chunks.length - 1];
  check(last.usage && last.choices.length === 0, 'usage on the last chunk');
  check(chunks.slice(0, -1).every((c) => c.usage == null), 'usage only on the last chunk');
  seen.stream = { text, usage: last.usage, chunks: chunks.length };

  const history = [];
  const replies = [];
  for (const n of [1, 2, 3]) {
    history.push({ role: 'user', content: `${tag} stateless turn ${n} about the harbour office` });
    const r = await client.chat.completions.create({
      model,
      user: `${tag}-stateless`,
      messages: [{ role: 'system', content: `${tag} app instruction: answer in English.` }, ...history],
    });
    const answer = r.choices[0].message.content;
    replies.push(answer);
    history.push({ role: 'assistant', content: answer });
  }
  seen.stateless = replies;

  const stateful = [];
  for (const n of [1, 2, 3]) {
    const r = await client.chat.completions.create(
      { model, user: `${tag}-stateful`, messages: [{ role: 'user', content: `${tag} stateful turn ${n}` }] },
      { headers: { 'X-Troupe-Room': `${tag}-room` } },
    );
    stateful.push(r.choices[0].message.content);
  }
  seen.stateful = stateful;

  const msgs = [{ role: 'user', content: `${tag} idempotent question` }];
  const opts = { headers: { 'Idempotency-Key': `${tag}-idem-1` } };
  const first = await client.chat.completions.create({ model, messages: msgs, user: `${tag}-idem` }, opts);
  const again = await client.chat.completions.create({ model, messages: msgs, user: `${tag}-idem` }, opts);
  check(first.choices[0].message.content === again.choices[0].message.content, 'the same answer twice');
  check(first.id === again.id, 'the same id twice');
  seen.idempotent = first.choices[0].message.content;

  try {
    await client.chat.completions.create({ model: 'nobody-here', messages: msgs });
    check(false, 'an unknown model throws');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.code === 'model_not_found', `NotFoundError: ${e}`);
  }
  try {
    await new OpenAI({ baseURL, apiKey: 'wrong-token', maxRetries: 0 }).models.list();
    check(false, 'a wrong token throws');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError, `AuthenticationError: ${e}`);
  }
  let refused = null;
  for (let n = 1; n < 12 && !refused; n++) {
    try {
      await client.chat.completions.create({
        model,
        user: `${tag}-spender`,
        messages: [{ role: 'user', content: `${tag} spend ${n}` }],
      });
    } catch (e) {
      check(e instanceof OpenAI.RateLimitError, `RateLimitError: ${e}`);
      const h = e.headers;
      const retry = typeof h?.get === 'function' ? h.get('retry-after') : h?.['retry-after'];
      check(retry != null, '429 says when to retry');
      refused = { after: n - 1, code: e.code };
    }
  }
  check(refused, 'an exhausted user budget throws RateLimitError');
  seen.budget = refused;

  console.log(JSON.stringify(seen));
}

main().catch((e) => {
  console.error(`FAILED: ${e?.stack ?? e}`);
  process.exit(1);
});
