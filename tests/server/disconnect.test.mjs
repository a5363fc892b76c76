// disconnect.test.mjs — a client that hangs up while its request is still queued (not yet
// running) has it cancelled at once, streamed or not: the server must not wait for the
// request to be admitted (or to finish) to notice. The server runs one row at a time, so a
// long stream holds the row and everything else queues behind it; each hang-up must be
// visible in /metrics (disconnect cancel, engine cancel, queue empty) while that stream is
// still running, and must not disturb it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, TINY, metrics, SLOW } from './helpers.mjs';

let srv, client, holder, holderDone = false;
const LONG = 480; // the context is 512; at SLOW (sanitizer) speed this runs for many seconds

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// How long to wait for progress that should take milliseconds; long enough for a loaded
// machine and the sanitizers. Promptness itself is asserted separately: the holder is
// still running, and a cancelled generation stopped early.
async function until(what, pred, ms = SLOW ? 20000 : 5000) {
  const t0 = Date.now();
  for (;;) {
    const m = await metrics(srv.url);
    if (pred(m)) return m;
    if (Date.now() - t0 > ms) assert.fail(`${what}: not within ${ms} ms\n${m.text.split('\n').filter((l) => /^kiln_(queue|running|requests_cancelled|engine_requests_cancelled)/.test(l)).join('\n')}`);
    await sleep(20);
  }
}

before(async () => {
  srv = await startServer(TINY, ['--max-batch', '1']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  const s = await client.completions.create({
    model: 'kiln-tiny', prompt: 'Once upon a time', max_tokens: LONG, ignore_eos: true, stream: true, stream_options: { include_usage: true },
  });
  const it = s[Symbol.asyncIterator]();
  await it.next(); // the first token: it holds the only running row now
  holder = (async () => {
    let usage = null, finish = null;
    for (let r = await it.next(); !r.done; r = await it.next()) {
      usage = r.value.usage ?? usage;
      finish = r.value.choices[0]?.finish_reason ?? finish;
    }
    holderDone = true;
    return { usage, finish };
  })();
});
after(async () => { assert.equal(await srv.stop(), 0); });

const cancelled = (m) => [m.get('kiln_requests_cancelled_on_disconnect_total'), m.get('kiln_engine_requests_cancelled_total')];

test('a queued streaming request is cancelled as soon as its client hangs up', async () => {
  const m0 = await metrics(srv.url);
  const [d0, e0] = cancelled(m0);
  const ctl = new AbortController();
  const res = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', signal: ctl.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'kiln-tiny', messages: [{ role: 'user', content: 'Wait your turn.' }], max_tokens: 20, stream: true }),
  });
  assert.equal(res.status, 200);
  const first = new TextDecoder().decode((await res.body.getReader().read()).value);
  assert.match(first, /"role":"assistant"/); // the role chunk is sent at submit
  await until('queued', (m) => m.get('kiln_queue_depth') === 1);
  ctl.abort();
  const m = await until('cancelled', (x) => cancelled(x)[0] === d0 + 1 && cancelled(x)[1] === e0 + 1 && x.get('kiln_queue_depth') === 0);
  assert.equal(holderDone, false, 'noticed while the running stream still holds the row');
  assert.equal(m.get('kiln_running_rows'), 1);
  await until('logged', () => /POST \/v1\/chat\/completions 499 prompt=\d+ cached=\d+ completion=0 .*\(client gone\)/.test(srv.log()));
});

test('a queued non-streaming request is cancelled as soon as its client hangs up', async () => {
  const [d0, e0] = cancelled(await metrics(srv.url));
  const ctl = new AbortController();
  const req = fetch(srv.url + '/v1/completions', {
    method: 'POST', signal: ctl.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'kiln-tiny', prompt: 'Queued and then forgotten', max_tokens: 20 }),
  }).catch((e) => e);
  await until('queued', (m) => m.get('kiln_queue_depth') === 1);
  ctl.abort();
  assert.equal((await req).name, 'AbortError');
  await until('cancelled', (x) => cancelled(x)[0] === d0 + 1 && cancelled(x)[1] === e0 + 1 && x.get('kiln_queue_depth') === 0);
  assert.equal(holderDone, false, 'noticed while the running stream still holds the row');
});

test('the stream that held the row came out whole', async () => {
  const { usage, finish } = await holder;
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, LONG);
  assert.equal((await metrics(srv.url)).get('kiln_queue_depth'), 0);
});

test('a running non-streamed request is cancelled as soon as its client hangs up', async () => {
  const [d0, e0] = cancelled(await metrics(srv.url));
  const g0 = (await metrics(srv.url)).get('kiln_engine_generated_tokens_total');
  const ctl = new AbortController();
  const req = fetch(srv.url + '/v1/completions', {
    method: 'POST', signal: ctl.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'kiln-tiny', prompt: 'A long answer nobody reads', max_tokens: LONG, ignore_eos: true }),
  }).catch((e) => e);
  await until('running', (m) => m.get('kiln_engine_generated_tokens_total') > g0 + 5);
  ctl.abort();
  assert.equal((await req).name, 'AbortError');
  const m = await until('cancelled', (x) => cancelled(x)[0] === d0 + 1 && cancelled(x)[1] === e0 + 1 && x.get('kiln_running_rows') === 0);
  const gen = m.get('kiln_engine_generated_tokens_total') - g0;
  assert.ok(gen < LONG, `stopped early (${gen} of ${LONG} tokens)`);
  await sleep(200);
  assert.equal((await metrics(srv.url)).get('kiln_engine_generated_tokens_total'), m.get('kiln_engine_generated_tokens_total'), 'and stays stopped');
});
