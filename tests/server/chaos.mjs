// chaos.mjs — random and mutated HTTP traffic against a running `kiln serve`, for finding
// crashes the scripted tests do not think of (not part of `make test`: it is random by design).
//
// It starts KILN (default build-asan/kiln, so AddressSanitizer/UBSan watch the server) on
// models/kiln-tiny, then for SECONDS keeps CONC clients busy with: valid requests of every
// route with one field mutated (wrong types, huge or negative numbers, deep nesting, long
// strings, invalid UTF-8 bytes, unknown keys), raw sockets writing malformed HTTP (bad request
// lines, lying Content-Length, chunked bodies cut short, headers of 64 KB), and clients that
// hang up mid-body or mid-stream. What must hold: the server never answers 5xx, answers every
// complete request, is alive at the end, answers /health, and stops with exit code 0 on SIGTERM.
//
//   node tests/server/chaos.mjs [SECONDS=120] [CONC=8]     (KILN=path, SEED=n)
import { spawn } from 'node:child_process';
import net from 'node:net';

const SECONDS = Number(process.argv[2] ?? 120), CONC = Number(process.argv[3] ?? 8);
const KILN = process.env.KILN ?? 'build-asan/kiln';
let seed = Number(process.env.SEED ?? Date.now() % 100000);
console.log(`chaos: ${KILN}, ${SECONDS} s, ${CONC} clients, SEED=${seed}`);
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rnd() * a.length)];

const srv = spawn(KILN, ['serve', 'models/kiln-tiny', '--port', '0', '--threads', '1', '--max-body', '1048576'], { stdio: ['ignore', 'pipe', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  const on = (d) => { log += d; const m = /listening on [^\s]*:(\d+)/.exec(log); if (m) resolve(Number(m[1])); };
  srv.stdout.on('data', on);
  srv.stderr.on('data', on);
  srv.on('exit', (c) => reject(new Error(`kiln exited (${c}) before listening:\n${log}`)));
});
const base = `http://127.0.0.1:${port}`;

const VALID = [
  ['/v1/chat/completions', { model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me about the war.' }], max_tokens: 8, temperature: 0.7, stream: false }],
  ['/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], max_tokens: 6, stream: true, stream_options: { include_usage: true }, stop: ['.'], logprobs: true, top_logprobs: 2 }],
  ['/v1/completions', { model: 'm', prompt: 'Once upon a time', max_tokens: 6, logit_bias: { '42': -100 }, seed: 3, echo: true }],
  ['/v1/completions', { model: 'm', prompt: [1, 2, 3], max_tokens: 4, stream: true }],
  ['/v1/messages', { model: 'm', max_tokens: 6, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }], stop_sequences: ['x'], stream: false }],
  ['/v1/messages', { model: 'm', max_tokens: 6, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], stream: true }],
  ['/v1/messages/count_tokens', { model: 'm', messages: [{ role: 'user', content: 'Hi' }] }],
  ['/tokenize', { text: 'hello world' }],
  ['/detokenize', { tokens: [1, 2, 3] }],
];
const WEIRD = () => pick([null, true, -1, 0, 1e308, -1e308, 2 ** 53 + 1, 1.5, '', 'x'.repeat(1 + Math.floor(rnd() * 70000)), rnd() < 0.2 ? 'y'.repeat(1200000) : 'y', '\u0000', '\ud800',
  [], {}, [[[[[[[[[[[]]]]]]]]]]], JSON.parse('['.repeat(300) + ']'.repeat(300)), { role: 'tool' }, [{ type: 'image_url' }], 'NaN', -0]);
function mutate(o, depth = 0) {
  if (typeof o !== 'object' || o === null) return WEIRD();
  const c = Array.isArray(o) ? [...o] : { ...o };
  const keys = Object.keys(c);
  if (!keys.length || rnd() < 0.15) { c[pick(['n', 'max_tokens', 'top_k', 'tools', 'tool_choice', 'response_format', 'x' + Math.floor(rnd() * 9)])] = WEIRD(); return c; }
  const k = pick(keys);
  c[k] = depth < 3 && typeof c[k] === 'object' && rnd() < 0.6 ? mutate(c[k], depth + 1) : WEIRD();
  return c;
}

const stats = { requests: 0, byStatus: {}, raw: 0, hangups: 0 };
const failures = [];
async function httpOnce() {
  const [route, body] = pick(VALID);
  let text = JSON.stringify(rnd() < 0.8 ? mutate(body) : body);
  if (rnd() < 0.1) text = text.slice(0, Math.floor(rnd() * text.length)); // cut JSON
  let payload = Buffer.from(text);
  if (rnd() < 0.05) { payload = Buffer.from(payload); payload[Math.floor(rnd() * payload.length)] = 0xff; } // invalid UTF-8
  const ctl = new AbortController();
  const hang = rnd() < 0.1;
  if (hang) setTimeout(() => ctl.abort(), Math.floor(rnd() * 50));
  try {
    const res = await fetch(base + route, { method: pick(['POST', 'POST', 'POST', 'GET', 'PUT', 'OPTIONS']), body: payload, signal: ctl.signal,
      headers: { 'content-type': pick(['application/json', 'application/json', 'text/plain', 'application/json; charset=utf-8']) } });
    await res.arrayBuffer();
    stats.requests++;
    stats.byStatus[res.status] = (stats.byStatus[res.status] ?? 0) + 1;
    if (res.status >= 500) failures.push(`${res.status} from ${route}: ${text.slice(0, 300)}`);
  } catch (e) {
    if (hang || e.name === 'AbortError') stats.hangups++;
    else if (srv.exitCode !== null) failures.push(`server gone during ${route}: ${e.message}`);
  }
}
function rawOnce() {
  const req = pick([
    'GARBAGE\r\n\r\n',
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"model":`,
    `POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n5\r\n{"pro\r\nZZ\r\n`,
    `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70000)}\r\n\r\n`,
    `POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}`,
    `GET /${'%'.repeat(3000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
    `POST /tokenize HTTP/1.0\r\nContent-Length: 20\r\n\r\n{"text": "\xff\xfe"}`,
    `GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n`,
  ]);
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      const cut = rnd() < 0.3 ? Math.floor(rnd() * req.length) : req.length;
      s.write(Buffer.from(req.slice(0, cut), 'latin1'));
      if (cut < req.length || rnd() < 0.3) setTimeout(() => s.destroy(), Math.floor(rnd() * 30));
      else s.end();
    });
    s.on('data', (d) => { const m = /^HTTP\/1\.[01] (\d+)/.exec(d.toString('latin1')); if (m && Number(m[1]) >= 500) failures.push(`raw ${m[1]} for ${JSON.stringify(req.slice(0, 80))}`); });
    s.on('error', () => {});
    s.on('close', () => { stats.raw++; resolve(); });
    s.setTimeout(5000, () => s.destroy());
  });
}

const end = Date.now() + SECONDS * 1000;
await Promise.all(Array.from({ length: CONC }, async () => {
  while (Date.now() < end && srv.exitCode === null) await (rnd() < 0.25 ? rawOnce() : httpOnce());
}));
const alive = srv.exitCode === null;
let health = 0;
try { health = (await fetch(base + '/health')).status; } catch { /* dead */ }
srv.kill('SIGTERM');
const code = await new Promise((r) => (srv.exitCode !== null ? r(srv.exitCode) : srv.on('exit', (c) => r(c))));
console.log(`chaos: ${stats.requests} HTTP answers ${JSON.stringify(stats.byStatus)}, ${stats.raw} raw connections, ${stats.hangups} hang-ups; alive ${alive}, /health ${health}, exit ${code}`);
const asan = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/.exec(log);
if (asan) failures.push(`sanitizer report in the server log:\n${log.slice(Math.max(0, asan.index - 200), asan.index + 3000)}`);
if (!alive || health !== 200 || code !== 0) failures.push(`server alive ${alive}, /health ${health}, exit code ${code}\n${log.slice(-3000)}`);
for (const f of failures.slice(0, 20)) console.log('FAIL: ' + f);
process.exit(failures.length ? 1 : 0);
