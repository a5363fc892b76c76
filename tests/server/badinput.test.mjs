// badinput.test.mjs — every client mistake gets a clear 4xx naming what was wrong, and
// none of them disturbs a stream that is running at the same time. The server runs with
// an API key, a 4 KiB body limit, one running row and a queue of one, so 401, 413 and 429
// are reachable on purpose.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, TINY, post, SLOW } from './helpers.mjs';

const KEY = 'sk-test-kiln';
let srv, client, bystander;
const auth = { authorization: `Bearer ${KEY}` };
const LONG = SLOW ? 60 : 150;

before(async () => {
  srv = await startServer(TINY, ['--max-body', '4096', '--max-batch', '1', '--max-queue', '1'], { KILN_API_KEY: KEY });
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: KEY, maxRetries: 0 });
  // a stream that runs through the whole file; it must come out whole
  bystander = (async () => {
    const s = await client.chat.completions.create({
      model: 'kiln-tiny', messages: [{ role: 'user', content: 'Tell me a long story.' }],
      max_tokens: LONG, ignore_eos: true, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let usage = null, finish = null;
    for await (const ch of s) {
      if (ch.usage) usage = ch.usage;
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    return { usage, finish };
  })();
  // let it be admitted (running) before the rest
  await new Promise((r) => setTimeout(r, 300));
});
after(async () => { assert.equal(await srv.stop(), 0); });

const chat = (extra) => ({ model: 'kiln-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...extra });

function expect400(r, param, re) {
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.type, 'invalid_request_error');
  if (param !== undefined) assert.equal(r.json.error.param, param);
  if (re) assert.match(r.json.error.message, re);
}

test('401 without or with a wrong key; Bearer and x-api-key work; /health is open', async () => {
  const no = await post(srv.url + '/v1/chat/completions', chat());
  assert.equal(no.status, 401);
  assert.equal(no.json.error.type, 'authentication_error');
  const bad = new OpenAI({ baseURL: srv.url + '/v1', apiKey: KEY + 'x', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  await assert.rejects(new OpenAI({ baseURL: srv.url + '/v1', apiKey: KEY.slice(0, -1), maxRetries: 0 }).models.list(), (e) => e.status === 401);
  assert.equal((await client.models.list()).data.length, 1);
  const ant = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
  assert.equal((await ant.messages.countTokens({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })).input_tokens > 0, true);
  await assert.rejects(new Anthropic({ baseURL: srv.url, apiKey: 'nope', maxRetries: 0 }).messages.countTokens({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 401 && e.error.error.type === 'authentication_error');
  assert.equal((await fetch(srv.url + '/health')).status, 200);
  assert.equal((await fetch(srv.url + '/metrics')).status, 401);
});

test('malformed JSON says where', async () => {
  const r = await post(srv.url + '/v1/chat/completions', '{"messages": [1, 2,, 3]}', auth);
  expect400(r, null, /malformed JSON at line 1, column 2\d/);
  const e = await post(srv.url + '/v1/chat/completions', '', auth);
  expect400(e, null, /empty/);
  const a = await post(srv.url + '/v1/chat/completions', '[1]', auth);
  expect400(a, null, /must be a JSON object/);
});

test('wrong types and ranges name the parameter', async () => {
  const cases = [
    [{ temperature: 'hot' }, 'temperature'], [{ temperature: 3 }, 'temperature'], [{ top_p: 0 }, 'top_p'],
    [{ max_tokens: 0 }, 'max_tokens'], [{ max_tokens: 1.5 }, 'max_tokens'], [{ n: 2 }, 'n'], [{ stream: 'yes' }, 'stream'],
    [{ top_logprobs: 3 }, 'top_logprobs'], [{ logit_bias: { abc: 1 } }, 'logit_bias'], [{ logit_bias: { 5: 500 } }, 'logit_bias'],
    [{ stop: [1] }, 'stop'], [{ messages: 'hi' }, 'messages'], [{ messages: [{ role: 'wizard', content: 'x' }] }, 'messages'],
    [{ messages: [{ role: 'user' }] }, 'messages'], [{ response_format: { type: 'json_object' } }, 'response_format'],
    [{ tools: {} }, 'tools'], [{ tool_choice: 'required' }, 'tool_choice'], [{ reasoning_effort: 'max' }, 'reasoning_effort'],
    [{ presence_penalty: -3 }, 'presence_penalty'], [{ seed: 'x' }, 'seed'], [{ stream_options: 5 }, 'stream_options'],
  ];
  for (const [extra, param] of cases) {
    const r = await post(srv.url + '/v1/chat/completions', chat(extra), auth);
    expect400(r, param);
    assert.match(r.json.error.message, new RegExp(param.split('.')[0]), `${JSON.stringify(extra)}: ${r.json.error.message}`);
  }
  const rf = await post(srv.url + '/v1/chat/completions', chat({ response_format: { type: 'json_schema', json_schema: {} } }), auth);
  assert.match(rf.json.error.message, /not supported yet/);
  const img = await post(srv.url + '/v1/chat/completions', chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }), auth);
  expect400(img, 'messages', /image_url/);
  const cp = await post(srv.url + '/v1/completions', { prompt: [1, -5], max_tokens: 2 }, auth);
  expect400(cp, 'prompt', /prompt\[1\]/);
  const am = await post(srv.url + '/v1/messages', { model: 'x', max_tokens: 'ten', messages: [{ role: 'user', content: 'hi' }] }, auth);
  assert.equal(am.status, 400);
  assert.equal(am.json.type, 'error');
  assert.match(am.json.error.message, /max_tokens/);
});

test('invalid UTF-8 is a 400 with the offset', async () => {
  const body = Buffer.concat([Buffer.from('{"model":"x","messages":[{"role":"user","content":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}]}')]);
  const r = await post(srv.url + '/v1/chat/completions', new Uint8Array(body), auth);
  expect400(r, null, /UTF-8.*offset 51/);
});

test('bodies over --max-body are 413, with or without Content-Length', async () => {
  const big = JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(5000) }] }));
  const r = await post(srv.url + '/v1/chat/completions', big, auth);
  assert.equal(r.status, 413);
  assert.match(r.json.error.message, /4096/);
  const chunks = [big.slice(0, 3000), big.slice(3000)];
  const stream = new ReadableStream({ pull(c) { if (chunks.length) c.enqueue(new TextEncoder().encode(chunks.shift())); else c.close(); } });
  const r2 = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', body: stream, duplex: 'half', headers: { ...auth, 'content-type': 'application/json' } });
  assert.equal(r2.status, 413);
});

test('404 for unknown routes, 405 with Allow for the wrong method', async () => {
  const r = await fetch(srv.url + '/v1/chat/complete', { headers: auth });
  assert.equal(r.status, 404);
  assert.match((await r.json()).error.message, /no route GET \/v1\/chat\/complete/);
  const m = await fetch(srv.url + '/v1/chat/completions', { headers: auth });
  assert.equal(m.status, 405);
  assert.equal(m.headers.get('allow'), 'POST, OPTIONS');
  const d = await fetch(srv.url + '/v1/models', { method: 'DELETE', headers: auth });
  assert.equal(d.status, 405);
  assert.equal(d.headers.get('allow'), 'GET, OPTIONS');
});

test('prompts too long for the context: 400 with the numbers', async () => {
  const words = 'the city and the river and the old court '.repeat(70);
  const r = await post(srv.url + '/v1/chat/completions', chat({ messages: [{ role: 'user', content: words }], max_tokens: undefined }), auth);
  expect400(r, 'messages', /prompt is \d+ tokens, which leaves no room in the context of 512 tokens/);
  const r2 = await post(srv.url + '/v1/chat/completions', chat({ max_tokens: 600 }), auth);
  expect400(r2, 'max_tokens', /\(\d+ tokens\) plus max_tokens \(600\) is \d+ tokens, over the context length of 512/);
});

test('queue full: 429 with Retry-After', async () => {
  // A holds the only running row (its first token proves it is running).
  const ctl = new AbortController();
  const a = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', signal: ctl.signal, headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify(chat({ max_tokens: 400, ignore_eos: true, stream: true })),
  });
  const reader = a.body.getReader();
  for (let seen = ''; !/"content":"[^"]/.test(seen);) seen += new TextDecoder().decode((await reader.read()).value);
  // With one running row and one queue place, a burst of 8 cannot all be taken.
  const burst = await Promise.all(Array.from({ length: 8 }, () => post(srv.url + '/v1/chat/completions', chat({ max_tokens: 1 }), auth)));
  const refused = burst.filter((r) => r.status === 429);
  assert.ok(refused.length >= 1, `statuses: ${burst.map((r) => r.status)}`);
  for (const r of burst) assert.ok(r.status === 200 || r.status === 429, r.text);
  for (const r of refused) {
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(r.json.error.type, 'rate_limit_error');
    assert.match(r.json.error.message, /queue is full/);
  }
  ctl.abort();
});

test('none of it disturbed the stream that was running', async () => {
  const { usage, finish } = await bystander;
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, LONG);
});
