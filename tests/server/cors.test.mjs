// cors.test.mjs — what a browser needs to call kiln serve from a web page: preflights
// (OPTIONS, never asking for the key) and Access-Control-Allow-Origin on every response
// to an allowed origin, errors and SSE streams included. Three servers: the default
// (pages from localhost/127.0.0.1/[::1] only), an explicit list with an API key, and '*'.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, TINY, BIN } from './helpers.mjs';

const KEY = 'sk-cors';
const APP = 'https://app.example.com';
let local, listed, any;
before(async () => {
  local = await startServer(TINY);
  listed = await startServer(TINY, ['--cors-origin', `${APP}, http://10.1.2.3:8000/`], { KILN_API_KEY: KEY });
  any = await startServer(TINY, ['--cors-origin', '*']);
});
after(async () => {
  for (const s of [local, listed, any]) assert.equal(await s.stop(), 0);
});

const preflight = (url, path, origin, extra = {}) => fetch(url + path, {
  method: 'OPTIONS',
  headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, x-stainless-os', ...extra },
});

test('preflight from a local page: 204 with methods, the asked headers and max-age; no key needed', async () => {
  for (const origin of ['http://localhost:5173', 'http://127.0.0.1:3000', 'http://[::1]:8080', 'https://localhost']) {
    const r = await preflight(local.url, '/v1/chat/completions', origin);
    assert.equal(r.status, 204, origin);
    assert.equal(r.headers.get('access-control-allow-origin'), origin);
    assert.equal(r.headers.get('access-control-allow-methods'), 'POST, OPTIONS');
    assert.equal(r.headers.get('access-control-allow-headers'), 'authorization, content-type, x-stainless-os');
    assert.equal(r.headers.get('access-control-max-age'), '86400');
    assert.match(r.headers.get('vary'), /Origin/);
  }
  const g = await preflight(local.url, '/v1/models', 'http://localhost:5173', { 'access-control-request-method': 'GET' });
  assert.equal(g.headers.get('access-control-allow-methods'), 'GET, OPTIONS');
  // Chrome's private-network check before a page may reach a loopback address
  const pna = await preflight(local.url, '/v1/messages', 'http://localhost:5173', { 'access-control-request-private-network': 'true' });
  assert.equal(pna.headers.get('access-control-allow-private-network'), 'true');
  // the key is never asked for in a preflight
  const k = await preflight(listed.url, '/v1/chat/completions', APP);
  assert.equal(k.status, 204);
  assert.equal(k.headers.get('access-control-allow-origin'), APP);
});

test('other origins: preflight 403 naming the flag, no CORS headers on their requests', async () => {
  for (const [srv, origin] of [[local, 'https://evil.example'], [local, 'http://localhost.evil.example'], [local, 'http://127.0.0.1.nip.io'],
    [listed, 'http://localhost:5173'], [listed, 'https://app.example.com:8443']]) {
    const r = await preflight(srv.url, '/v1/chat/completions', origin);
    assert.equal(r.status, 403, origin);
    assert.equal(r.headers.get('access-control-allow-origin'), null);
    assert.match((await r.json()).error.message, /--cors-origin/);
    const h = await fetch(srv.url + '/health', { headers: { origin } });
    assert.equal(h.status, 200);
    assert.equal(h.headers.get('access-control-allow-origin'), null);
  }
  // a plain OPTIONS (no preflight) just lists the methods
  const o = await fetch(local.url + '/health', { method: 'OPTIONS' });
  assert.equal(o.status, 204);
  assert.equal(o.headers.get('allow'), 'GET, OPTIONS');
  assert.equal((await fetch(local.url + '/nowhere', { method: 'OPTIONS' })).status, 404);
});

test('every response to an allowed origin carries the headers: JSON, errors, /health, SSE', async () => {
  const origin = 'http://localhost:5173';
  const h = { origin, 'content-type': 'application/json' };
  const check = (r, what) => {
    assert.equal(r.headers.get('access-control-allow-origin'), origin, what);
    assert.equal(r.headers.get('access-control-expose-headers'), 'Retry-After', what);
  };
  check(await fetch(local.url + '/health', { headers: h }), '/health');
  check(await fetch(local.url + '/v1/models', { headers: h }), '/v1/models');
  const e404 = await fetch(local.url + '/v1/nope', { headers: h });
  assert.equal(e404.status, 404);
  check(e404, '404');
  const e400 = await fetch(local.url + '/v1/chat/completions', { method: 'POST', headers: h, body: '{"messages": 1}' });
  assert.equal(e400.status, 400);
  check(e400, '400');
  const sse = await fetch(local.url + '/v1/chat/completions', {
    method: 'POST', headers: h, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true }),
  });
  assert.equal(sse.headers.get('content-type'), 'text/event-stream');
  check(sse, 'SSE');
  assert.match(await sse.text(), /data: \[DONE\]/);
  // with a key: the 401 is readable by the page too, and the listed origins are matched exactly
  const u = await fetch(listed.url + '/v1/models', { headers: { origin: APP } });
  assert.equal(u.status, 401);
  assert.equal(u.headers.get('access-control-allow-origin'), APP);
  const ok = await fetch(listed.url + '/v1/models', { headers: { origin: 'http://10.1.2.3:8000', authorization: `Bearer ${KEY}` } });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get('access-control-allow-origin'), 'http://10.1.2.3:8000');
});

test("--cors-origin '*' allows any origin with a literal *; bad values are refused at start", async () => {
  const r = await preflight(any.url, '/v1/messages', 'https://anything.example');
  assert.equal(r.status, 204);
  assert.equal(r.headers.get('access-control-allow-origin'), '*');
  const g = await fetch(any.url + '/health', { headers: { origin: 'https://anything.example' } });
  assert.equal(g.headers.get('access-control-allow-origin'), '*');
  assert.equal(g.headers.get('vary'), null, 'the answer does not depend on the origin');
  assert.equal((await fetch(any.url + '/health')).headers.get('access-control-allow-origin'), null, 'no Origin, no CORS');
  for (const bad of ['app.example.com', 'https://app.example.com/path', 'https://']) {
    const p = spawnSync(BIN, ['serve', TINY, '--port', '0', '--cors-origin', bad], { encoding: 'utf8', timeout: 60000 });
    assert.equal(p.status, 1, bad);
    assert.match(p.stderr, /--cors-origin: '.*' is not an origin/);
  }
});
