// stress.test.mjs — 256 concurrent streams, and a client that disconnects mid-stream
// (its generation must be cancelled at once, and /metrics must show it). Under the
// sanitizers the model's arithmetic is ~15x slower, so there the streams run on the
// one-layer fixture model: the point there is the server's memory safety under load.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, TINY, metrics, SLOW } from './helpers.mjs';
import { writeFixture } from './fixture.mjs';

let srv, client, dir = null;
before(async () => {
  let model = TINY;
  if (SLOW) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-fixture-'));
    writeFixture(dir, TINY);
    model = dir;
  }
  srv = await startServer(model, ['--max-batch', '64', '--model-id', 'kiln-tiny']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 600000 });
});
after(async () => {
  assert.equal(await srv.stop(), 0);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('256 concurrent streams all finish whole', async () => {
  const N = 256, T = SLOW ? 4 : 8;
  const one = async (i) => {
    const s = await client.chat.completions.create({
      model: 'kiln-tiny', messages: [{ role: 'user', content: `Story number ${i} about the town.` }],
      max_tokens: T, ignore_eos: true, temperature: 0.8, seed: i, stream: true, stream_options: { include_usage: true },
    });
    let usage = null, finish = null, events = 0;
    for await (const ch of s) {
      if (ch.usage) usage = ch.usage;
      else events++;
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    return { usage, finish, events };
  };
  const before = await metrics(srv.url);
  const res = await Promise.all(Array.from({ length: N }, (_, i) => one(i)));
  for (const r of res) {
    assert.equal(r.finish, 'length');
    assert.equal(r.usage.completion_tokens, T);
    assert.ok(r.events >= 2);
  }
  // a request is counted when MHD reports it complete, which can be just after the client
  // has read the last byte: give the last few a moment
  const ok = (x) => x.get('kiln_requests_total{route="/v1/chat/completions",status="200"}') - before.get('kiln_requests_total{route="/v1/chat/completions",status="200"}');
  let m = await metrics(srv.url);
  for (let i = 0; i < 40 && ok(m) < N; i++) { await new Promise((r) => setTimeout(r, 50)); m = await metrics(srv.url); }
  assert.equal(ok(m), N);
  const steps = m.get('kiln_engine_steps_total') - before.get('kiln_engine_steps_total');
  assert.ok(steps < N * T / 4, `the streams were batched (${steps} steps for ${N * T} tokens)`);
});

test('a client that disconnects mid-stream has its generation cancelled', async () => {
  const before = await metrics(srv.url);
  const s = await client.chat.completions.create({
    model: 'kiln-tiny', messages: [{ role: 'user', content: 'Go on forever.' }], max_tokens: 400, ignore_eos: true, stream: true,
  });
  let n = 0;
  for await (const ch of s) {
    if (ch.choices[0]?.delta?.content) n++;
    if (n === 3) break; // leaving the loop aborts the request
  }
  let m;
  for (let i = 0; i < 100; i++) {
    m = await metrics(srv.url);
    if (m.get('kiln_requests_cancelled_on_disconnect_total') > before.get('kiln_requests_cancelled_on_disconnect_total') &&
        m.get('kiln_engine_requests_cancelled_total') > before.get('kiln_engine_requests_cancelled_total')) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(m.get('kiln_requests_cancelled_on_disconnect_total') - before.get('kiln_requests_cancelled_on_disconnect_total'), 1);
  assert.ok(m.get('kiln_engine_requests_cancelled_total') > before.get('kiln_engine_requests_cancelled_total'));
  assert.ok(m.get('kiln_requests_total{route="/v1/chat/completions",status="499"}') >= 1);
  const gen = m.get('kiln_engine_generated_tokens_total') - before.get('kiln_engine_generated_tokens_total');
  assert.ok(gen < 100, `generation stopped early (${gen} of 400 tokens)`);
  await new Promise((r) => setTimeout(r, 300));
  const later = await metrics(srv.url);
  assert.equal(later.get('kiln_engine_generated_tokens_total'), m.get('kiln_engine_generated_tokens_total'), 'and stays stopped');
});
