// openai.test.mjs — the official openai SDK against kiln serve on the default model
// (kiln-tiny): models, chat and completions, streaming and not, usage, logprobs, stop
// strings, seeds, the prefix cache in usage, /tokenize and /detokenize.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, TINY, post, metrics } from './helpers.mjs';

let srv, client;
before(async () => {
  srv = await startServer(TINY);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'unused', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0, 'clean exit on SIGTERM'); });

const hello = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me about the old city.' }];

test('models list and retrieve', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, 'kiln-tiny');
  const m = await client.models.retrieve('kiln-tiny');
  assert.equal(m.object, 'model');
  await assert.rejects(client.models.retrieve('gpt-7'), (e) => e.status === 404);
});

test('chat completion, not streamed', async () => {
  const r = await client.chat.completions.create({ model: 'kiln-tiny', messages: hello, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0);
  assert.ok(['length', 'stop'].includes(c.finish_reason));
  assert.ok(r.usage.prompt_tokens > 10);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat stream: one event per token, same text as not streamed, usage at the end', async () => {
  const body = { model: 'kiln-tiny', messages: hello, max_tokens: 16, temperature: 0, ignore_eos: true };
  const full = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', chunks = 0, finish = null, usage = null, role = null;
  for await (const ch of stream) {
    if (ch.usage) { usage = ch.usage; assert.equal(ch.choices.length, 0); continue; }
    assert.equal(ch.object, 'chat.completion.chunk');
    const d = ch.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) { text += d.content; chunks++; }
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, full.choices[0].message.content, 'greedy: stream and non-stream agree');
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 16);
  assert.ok(chunks >= 12, `expected about one content event per token, got ${chunks} for 16 tokens`);
});

test('a repeated prompt is served from the prefix cache', async () => {
  const long = [{ role: 'user', content: 'The history of the county court and the state legislature in the year before the election. '.repeat(3) }];
  await client.chat.completions.create({ model: 'kiln-tiny', messages: long, max_tokens: 2 });
  const r = await client.chat.completions.create({ model: 'kiln-tiny', messages: long, max_tokens: 2 });
  assert.ok(r.usage.prompt_tokens_details.cached_tokens >= 16, `cached ${r.usage.prompt_tokens_details.cached_tokens}`);
});

test('completions: string prompt, token-id prompt, echo, stream', async () => {
  const a = await client.completions.create({ model: 'kiln-tiny', prompt: 'The city of', max_tokens: 6, temperature: 0 });
  assert.equal(a.object, 'text_completion');
  assert.ok(a.choices[0].text.length > 0);
  const tok = await post(srv.url + '/tokenize', { prompt: 'The city of' });
  assert.equal(tok.status, 200);
  const b = await client.completions.create({ model: 'kiln-tiny', prompt: tok.json.tokens, max_tokens: 6, temperature: 0 });
  assert.equal(b.choices[0].text, a.choices[0].text, 'ids and text give the same prompt');
  const e = await client.completions.create({ model: 'kiln-tiny', prompt: 'The city of', max_tokens: 6, temperature: 0, echo: true });
  assert.equal(e.choices[0].text, 'The city of' + a.choices[0].text);
  let text = '', n = 0;
  for await (const ch of await client.completions.create({ model: 'kiln-tiny', prompt: 'The city of', max_tokens: 6, temperature: 0, stream: true })) {
    text += ch.choices[0]?.text ?? '';
    n++;
  }
  assert.equal(text, a.choices[0].text);
  assert.ok(n >= 5);
});

test('seeded sampling is reproducible; different seeds differ', async () => {
  const body = { model: 'kiln-tiny', messages: hello, max_tokens: 24, temperature: 1.0, top_p: 1, ignore_eos: true };
  const a = await client.chat.completions.create({ ...body, seed: 7 });
  const b = await client.chat.completions.create({ ...body, seed: 7 });
  const c = await client.chat.completions.create({ ...body, seed: 8 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
});

test('logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({ model: 'kiln-tiny', messages: hello, max_tokens: 4, logprobs: true, top_logprobs: 3, temperature: 0 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, 'greedy: the chosen token is the most likely');
  }
  const c = await client.completions.create({ model: 'kiln-tiny', prompt: 'The city', max_tokens: 3, logprobs: 2, temperature: 0 });
  assert.equal(c.choices[0].logprobs.tokens.length, 3);
  assert.equal(Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
});

test('stop strings end the reply before the stop string', async () => {
  const free = await client.completions.create({ model: 'kiln-tiny', prompt: 'The city of', max_tokens: 12, temperature: 0, ignore_eos: true });
  const words = free.choices[0].text.trim().split(' ');
  const stop = ' ' + words[Math.min(2, words.length - 1)];
  const r = await client.completions.create({ model: 'kiln-tiny', prompt: 'The city of', max_tokens: 12, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, free.choices[0].text.slice(0, free.choices[0].text.indexOf(stop)));
});

test('tokenize and detokenize round trip; health; metrics', async () => {
  const t = await post(srv.url + '/tokenize', { prompt: 'Hello, world!' });
  assert.ok(t.json.count > 0 && t.json.max_model_len === 512);
  const d = await post(srv.url + '/detokenize', { tokens: t.json.tokens });
  assert.equal(d.json.prompt, 'Hello, world!');
  const h = await fetch(srv.url + '/health');
  assert.equal(h.status, 200);
  const m = await metrics(srv.url);
  assert.ok(m.get('kiln_requests_total{route="/v1/chat/completions",status="200"}') >= 5);
  assert.ok(m.get('kiln_completion_tokens_total') > 0);
  assert.match(m.text, /kiln_time_to_first_token_seconds_bucket\{le="\+Inf"\} [1-9]/);
  assert.match(m.text, /kiln_inter_token_seconds_count [1-9]/);
  assert.match(m.text, /kiln_kv_blocks_total [1-9]/);
  assert.ok(m.get('kiln_prefix_cache_hit_tokens_total') >= 16);
});
