// helpers.mjs — starting a live `kiln serve` for a test file, on a free port.
//
// The binary comes from $KILN_BINARY (ctest sets it), else build/kiln. The server is
// started with --port 0 and the port is read from its "listening on" log line; stderr is
// kept so a failing test can show what the server said. $KILN_TEST_SERVE_ARGS (split on
// spaces) is added to every server's arguments, e.g. "--kv-dtype q8" to run the suite on the
// int8 cache.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.KILN_BINARY || path.join(ROOT, 'build/kiln');
export const TINY = process.env.KILN_MODEL || path.join(ROOT, 'models/kiln-tiny');
/* Sanitizer builds are ~10x slower: tests scale their token counts by this. */
export const SLOW = process.env.KILN_TEST_SANITIZE === '1' || process.env.KILN_TEST_SANITIZE === 'ON';

export async function startServer(model, args = [], env = {}) {
  if (!fs.existsSync(BIN)) throw new Error(`kiln binary not found at ${BIN} (set KILN_BINARY)`);
  const extra = (process.env.KILN_TEST_SERVE_ARGS || '').split(' ').filter((x) => x);
  const proc = spawn(BIN, ['serve', model, '--port', '0', '--threads', '1', ...extra, ...args], {
    env: { ...process.env, KILN_LOG: 'info', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('kiln serve did not start in 60 s:\n' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`kiln serve exited with ${code}:\n` + log)); });
  });
  const server = {
    url, proc,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      const done = new Promise((r) => proc.on('exit', (code, sig) => r(code ?? sig)));
      proc.kill('SIGTERM');
      return done;
    },
  };
  return server;
}

export async function metrics(url) {
  const text = await (await fetch(url + '/metrics')).text();
  const get = (name) => {
    const m = new RegExp('^' + name.replace(/[{}"=,/]/g, (c) => '\\' + c) + ' (\\S+)$', 'm').exec(text);
    return m ? Number(m[1]) : 0;
  };
  return { text, get };
}

export async function post(url, body, headers = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}
