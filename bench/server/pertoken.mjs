// pertoken.mjs — the server's fixed cost per streamed token, measured where nothing hides
// it: on the one-layer bigram fixture of the SDK tests (tests/server/fixture.mjs, hidden
// size 64), whose forward pass costs ~0.1 ms, so what the engine and the HTTP layer spend
// per token is most of the time per token.
//
//   node bench/server/pertoken.mjs [--bin build/kiln] [--threads 1] [--tokens 480] [--rounds 10]
//
// Per round, back to back: `kiln bench --concurrency 1` on the fixture (the engine through
// kiln.h, no HTTP: time per token = 1 / decode_tok_s) and one streamed /v1/completions
// request of the same length to `kiln serve` on the fixture (time per token from the
// client's first to last token event; server CPU per token from /proc over that span).
// The difference of the medians is what HTTP streaming adds per token: libmicrohttpd's
// resume/suspend, the SSE chunk's JSON, the write, and the wake-ups. The client runs on
// the same machine, so on a 2-core VM its own per-event work competes for the cores too.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFixture } from '../../tests/server/fixture.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const arg = (k, d) => { const i = process.argv.indexOf('--' + k); return i > 0 ? process.argv[i + 1] : d; };
const BIN = arg('bin', 'build/kiln'), TH = arg('threads', '1'), N = +arg('tokens', 480), R = +arg('rounds', 10);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-pertoken-'));
writeFixture(dir, path.join(ROOT, 'models/kiln-tiny'));

const proc = spawn(BIN, ['serve', dir, '--port', '0', '--threads', TH], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const url = await new Promise((res, rej) => {
  proc.stderr.on('data', (d) => { log += d; const m = /listening on (\S+)/.exec(log); if (m) res(m[1]); });
  proc.on('exit', () => rej(new Error(log)));
});
const cpu = () => {
  const f = fs.readFileSync(`/proc/${proc.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
};

const engineUs = [], serverUs = [], serverCpuUs = [];
for (let r = 0; r < R; r++) {
  const out = execFileSync(BIN, ['bench', dir, '--concurrency', '1', '--prompt-tokens', '4', '--gen-tokens', String(N), '--threads', TH, '--json'],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  engineUs.push(1e6 / JSON.parse(out)[0].decode_tok_s);
  const res = await fetch(url + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: [1, 2, 3, 4], max_tokens: N, ignore_eos: true, temperature: 0, stream: true }),
  });
  const rd = res.body.getReader(), dec = new TextDecoder();
  let buf = '', events = 0, tFirst = 0, tLast = 0, cFirst = 0, cLast = 0;
  for (;;) {
    const { value, done } = await rd.read();
    if (done) break;
    const now = performance.now();
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {') || JSON.parse(ev.slice(6)).choices[0].text === '') continue; // the finish chunk
      if (++events === 1) { tFirst = now; cFirst = cpu(); }
      tLast = now;
      cLast = cpu();
    }
  }
  if (events !== N) throw new Error(`${events} token events for ${N} tokens`); // every fixture token is "!"
  serverUs.push((tLast - tFirst) * 1e3 / (events - 1));
  serverCpuUs.push((cLast - cFirst) * 1e6 / (events - 1));
}
proc.kill('SIGTERM');
fs.rmSync(dir, { recursive: true, force: true });
const med = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1];
console.log(JSON.stringify({
  threads: +TH, tokens: N, rounds: R,
  engine_us_per_token: +med(engineUs).toFixed(1), server_stream_us_per_token: +med(serverUs).toFixed(1),
  http_adds_us_per_token: +(med(serverUs) - med(engineUs)).toFixed(1), server_cpu_us_per_token: +med(serverCpuUs).toFixed(1),
}));
