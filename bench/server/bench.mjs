// bench.mjs — server overhead at batch 1, and time to first byte for a cached prompt.
//
//   node bench/server/bench.mjs [--bin build/kiln] [--model models/kiln-tiny] [--threads 1]
//        [--tokenizer DIR] [--prompt-tokens 64] [--gen-tokens 128] [--rounds 5]
//
// Overhead: `kiln bench` (model_forward in a loop, greedy) against one streamed
// /v1/completions request through `kiln serve` (engine thread, scheduler, sampler, detok,
// HTTP, SSE), same model, same threads, the same prompt length and token count. The two
// are interleaved round by round and the best of each is kept, so background load on a
// shared machine hits both alike. Server decode tok/s = (completion tokens - 1) / (time of
// the finish chunk - time of the first text event), as the client sees them (the finish
// chunk goes out with the last token; counting events instead would miss tokens whose
// text is an incomplete UTF-8 sequence, which random-weight checkpoints produce often).
//
// --tokenizer DIR: for checkpoints without a tokenizer (kiln synth makes none), a
// temporary model dir of links to MODEL's files plus DIR's tokenizer.json and
// tokenizer_config.json, so the server detokenizes and streams one event per token as it
// would for a real model, and the chat template is there for the cached-prompt timing.
// E.g. --model /work/synth/qwen3-0.6b-q4 --tokenizer tests/.cache/tokenizers/qwen3.
//
// Cached TTFB: the same chat prompt twice; the second is served from the prefix cache.
// Reported: time to the first SSE byte (the role chunk, sent at submit) and to the first
// content token, median of the rounds.
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const arg = (k, d) => { const i = process.argv.indexOf('--' + k); return i > 0 ? process.argv[i + 1] : d; };
const BIN = arg('bin', 'build/kiln'), TH = arg('threads', '1'), TOK = arg('tokenizer', null);
let MODEL = arg('model', 'models/kiln-tiny');
const MODEL_ARG = MODEL;
let tmpModel = null;
if (TOK) {
  tmpModel = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-bench-model-'));
  for (const f of fs.readdirSync(MODEL)) fs.symlinkSync(path.resolve(MODEL, f), path.join(tmpModel, f));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
    fs.rmSync(path.join(tmpModel, f), { force: true });
    fs.symlinkSync(path.resolve(TOK, f), path.join(tmpModel, f));
  }
  MODEL = tmpModel;
}
const P = +arg('prompt-tokens', 64), G = +arg('gen-tokens', 128), R = +arg('rounds', 5);

function kilnBench() {
  const out = execFileSync(BIN, ['bench', MODEL, '--prompt-tokens', String(P), '--gen-tokens', String(G), '--threads', TH, '--json']);
  return JSON.parse(out).decode_tok_s;
}

/* CPU seconds (user + system) of a kiln bench run with g generated tokens. On a shared,
 * loaded machine wall-clock rates swing by tens of percent between runs; CPU time per
 * token does not, so the overhead is also reported as CPU time per decoded token:
 * (cpu(G) - cpu(0)) / G for kiln bench, the server process's CPU time from its first
 * streamed token to its last / (tokens - 1) for the server (idle threads cost nothing while
 * blocked; /proc counts in 10 ms ticks, fine over seconds). Both include the compute
 * threads' spin-waiting between parallel jobs, which is why CPU per token exceeds wall
 * time per token with 2 threads. */
function benchCpu(g) {
  const out = spawnSync('/usr/bin/time', ['-f', '%U %S', BIN, 'bench', MODEL, '--prompt-tokens', String(P), '--gen-tokens', String(g), '--threads', TH, '--json'],
    { stdio: ['ignore', 'ignore', 'pipe'] }).stderr.toString();
  const [u, s] = out.trim().split('\n').pop().split(' ').map(Number);
  return u + s;
}
function procCpu(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; /* utime, stime in clock ticks (USER_HZ = 100) */
}

async function start() {
  const proc = spawn(BIN, ['serve', MODEL, '--port', '0', '--threads', TH], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const url = await new Promise((res, rej) => {
    proc.stderr.on('data', (d) => { log += d; const m = /listening on (\S+)/.exec(log); if (m) res(m[1]); });
    proc.on('exit', () => rej(new Error(log)));
  });
  return { url, pid: proc.pid, stop: () => new Promise((r) => { proc.on('exit', r); proc.kill('SIGTERM'); }) };
}

/* Streams one request; returns the times of the first byte, of each text event and of
 * the finish chunk, and the usage. With pid: also the server's CPU seconds at the first
 * text event and at the finish chunk, so its CPU per decoded token leaves out the prefill. */
async function stream(url, path, body, pid = 0) {
  const t0 = performance.now();
  const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', firstByte = null, finish = null, usage = null, cpuFirst = null, cpuFinish = null;
  const tokens = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const now = performance.now();
    if (firstByte === null) firstByte = now - t0;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      const c = j.choices?.[0];
      if (c && ((c.text ?? '') !== '' || (c.delta?.content ?? '') !== '')) {
        tokens.push(now - t0);
        if (pid && cpuFirst === null) cpuFirst = procCpu(pid);
      }
      if (c?.finish_reason) { finish = now - t0; if (pid) cpuFinish = procCpu(pid); }
    }
  }
  return { firstByte, tokens, finish, usage, cpuFirst, cpuFinish };
}

/* The engine alone (kiln bench --concurrency 1: kiln_submit and events, no HTTP), to
 * tell the engine's share of the overhead from the server's. */
function engineBench() {
  const out = execFileSync(BIN, ['bench', MODEL, '--concurrency', '1', '--prompt-tokens', String(P), '--gen-tokens', String(G), '--threads', TH, '--json'],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  return JSON.parse(out)[0].decode_tok_s;
}

const srv = await start();
const best = { bench: 0, engine: 0, server: 0 };
const paired = []; /* per round: server rate / kiln bench rate, measured back to back */
const ttfb = [], ttft = [], cached = [], cpuBench = [], cpuServer = [];
for (let r = 0; r < R; r++) {
  best.engine = Math.max(best.engine, engineBench());
  const prompt = Array.from({ length: P }, (_, i) => 100 + ((i * 7919 + r * 104729) % 7000));
  cpuBench.push((benchCpu(G) - benchCpu(0)) / G);
  const kb = kilnBench(); // right before the server's stream: the pair sees the same machine
  best.bench = Math.max(best.bench, kb);
  const s = await stream(srv.url, '/v1/completions', { prompt, max_tokens: G, ignore_eos: true, temperature: 0, stream: true, stream_options: { include_usage: true } }, srv.pid);
  const n = s.usage.completion_tokens;
  cpuServer.push((s.cpuFinish - s.cpuFirst) / (n - 1));
  if (n !== G || !s.tokens.length) throw new Error(`the server generated ${n} tokens (${s.tokens.length} text events), expected ${G}`);
  const rate = (n - 1) / ((s.finish - s.tokens[0]) / 1000);
  best.server = Math.max(best.server, rate);
  paired.push(rate / kb);
  const chat = { messages: [{ role: 'user', content: `Round ${r}: tell me about the history of the old county court house and the river.` }], max_tokens: 1, stream: true, stream_options: { include_usage: true } };
  try { // needs a chat template: synth checkpoints have none, then only the overhead is measured
    await stream(srv.url, '/v1/chat/completions', chat);          // fills the prefix cache
    const c = await stream(srv.url, '/v1/chat/completions', chat); // served from it
    ttfb.push(c.firstByte);
    ttft.push(c.tokens[0] ?? c.finish); // the one token's text may be an incomplete UTF-8 piece
    cached.push(c.usage.prompt_tokens_details.cached_tokens / c.usage.prompt_tokens);
  } catch (e) { if (!/no chat template/.test(e.message)) throw e; }
}
await srv.stop();
if (tmpModel) fs.rmSync(tmpModel, { recursive: true, force: true });
const med = (a) => { a = a.filter((x) => x !== undefined); return a.length ? a.sort((x, y) => x - y)[a.length >> 1] : NaN; };
const overhead = (1 - best.server / best.bench) * 100;
console.log(JSON.stringify({
  model: MODEL_ARG, tokenizer: TOK, threads: +TH, prompt_tokens: P, gen_tokens: G, rounds: R,
  kiln_bench_decode_tok_s: +best.bench.toFixed(2), engine_decode_tok_s: +best.engine.toFixed(2),
  server_stream_decode_tok_s: +best.server.toFixed(2),
  server_overhead_pct: +overhead.toFixed(2),
  paired_overhead_pct_median: +((1 - med(paired.slice())) * 100).toFixed(2),
  paired_overhead_pct_all: paired.map((x) => +((1 - x) * 100).toFixed(1)), server_vs_engine_pct: +((1 - best.server / best.engine) * 100).toFixed(2),
  cpu_ms_per_token_kiln_bench: +(med(cpuBench) * 1e3).toFixed(3), cpu_ms_per_token_server: +(med(cpuServer) * 1e3).toFixed(3),
  server_cpu_overhead_pct: +((med(cpuServer) / med(cpuBench) - 1) * 100).toFixed(2),
  cached_prompt_first_byte_ms: +med(ttfb).toFixed(2), cached_prompt_first_token_ms: +med(ttft).toFixed(2),
  cached_prompt_share: +med(cached).toFixed(3),
}));
