#!/usr/bin/env python3
"""serve_smoke.py — `kiln serve --backend cuda` end to end, on the GPU machine (standard library only).

The HTTP layer is the same on every backend and CI runs the official SDKs against it on the CPU
(tests/server/*.test.mjs); what only the GPU machine can show is the engine and the CUDA backend
under the server: requests arriving and leaving mid-step from HTTP threads, streamed and not,
sampling on the device, cancellation on disconnect, the prefix cache, and a clean shutdown. So:

  1. health, models, tokenize; one greedy chat completion, then the same streamed — the streamed
     text must equal the unstreamed one (same prompt, alone both times);
  2. Anthropic /v1/messages, unstreamed and streamed (the same text again), and /v1/completions;
  3. N concurrent requests of different lengths, greedy and sampled (seeded), streamed and not:
     every one 200 with a well-formed body; how many greedy answers equal the same prompt's
     answer alone is reported (not asserted: on CUDA a step's rows are batch invariant only at
     1..4 rows, docs/cuda.md);
  4. a seeded sampled request twice alone: the same text (the counter-based RNG);
  5. a client that drops a long stream after a few events: the server goes on, and /metrics
     counts the cancellation; bad requests get 4xx (malformed JSON, bad parameter, unknown route);
  6. SIGTERM: the process exits 0 within 30 s.

Usage: serve_smoke.py KILN_BINARY MODEL_DIR [--backend cuda] [--concurrency N] [extra serve args...]
Prints one line per check ("ok ..." / "FAIL ...") and a summary; exits 1 if any check failed.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

fails = 0
checks = 0


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    return cond


def start(binary, model, args):
    proc = subprocess.Popen([binary, "serve", model, "--port", "0"] + args, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "KILN_LOG": "info"})
    log = []
    url = [None]
    ready = threading.Event()

    def reader():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m and not url[0]:
                url[0] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=reader, daemon=True).start()
    ready.wait(300)
    return proc, url[0], log


def request(url, method, path, body=None, timeout=300, raw=None):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data is not None else {})
    r = c.getresponse()
    out = r.read()
    c.close()
    try:
        return r.status, json.loads(out)
    except ValueError:
        return r.status, out.decode(errors="replace")


def sse(url, path, body, stop_after=None, timeout=300):
    """streamed request: the data payloads (JSON) in order; stop_after=k drops the connection after k events"""
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=timeout)
    data = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(data)) + data)
    f = s.makefile("rb")
    status = int(f.readline().split()[1])
    while f.readline() not in (b"\r\n", b""):
        pass
    events = []
    while True:
        line = f.readline()
        if not line:
            break
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            try:
                events.append(json.loads(payload))
            except ValueError:
                pass  # a chunked-encoding size line never starts with data:
            if stop_after is not None and len(events) >= stop_after:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
                return status, events
            if events and events[-1].get("type") == "message_stop":
                break
    s.close()
    return status, events


def chat_text(r):
    return r["choices"][0]["message"]["content"] if isinstance(r, dict) and r.get("choices") else None


def chat_stream_text(events):
    return "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e.get("choices"))


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, model = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    conc = 16
    if "--concurrency" in args:
        i = args.index("--concurrency")
        conc = int(args[i + 1])
        del args[i:i + 2]
    t0 = time.time()
    proc, url, log = start(binary, model, args)
    if not check(url is not None, "server started (%s, %.1f s)" % (url, time.time() - t0)):
        print("".join(log[-20:]))
        return 1
    st, h = request(url, "GET", "/health")
    check(st == 200 and h.get("status") == "ok", "GET /health 200 ok")
    st, m = request(url, "GET", "/v1/models")
    mid = m["data"][0]["id"] if st == 200 and m.get("data") else "x"
    check(st == 200 and m.get("object") == "list", "GET /v1/models (%s)" % mid)
    st, tk = request(url, "POST", "/tokenize", {"prompt": "Hello, world"})
    check(st == 200 and tk.get("count", 0) > 0, "POST /tokenize (%s tokens)" % (tk.get("count") if isinstance(tk, dict) else "?"))

    msgs = [{"role": "user", "content": "Write a short poem about the sea."}]
    greedy = {"model": mid, "messages": msgs, "max_tokens": 48, "temperature": 0}
    t1 = time.time()
    st, r = request(url, "POST", "/v1/chat/completions", greedy)
    solo = chat_text(r)
    check(st == 200 and solo is not None and r["usage"]["completion_tokens"] > 0,
          "chat completion 200 (%s tokens, %.2f s, finish %s)" % (r["usage"]["completion_tokens"] if st == 200 else "?", time.time() - t1,
                                                                 r["choices"][0]["finish_reason"] if st == 200 else "?"))
    st, ev = sse(url, "/v1/chat/completions", {**greedy, "stream": True})
    check(st == 200 and chat_stream_text(ev) == solo, "chat completion streamed: %d events, text equal to unstreamed" % len(ev))

    amsg = {"model": mid, "max_tokens": 48, "temperature": 0, "messages": msgs}
    st, a = request(url, "POST", "/v1/messages", amsg)
    atext = a["content"][0]["text"] if st == 200 and a.get("content") else None
    check(st == 200 and a.get("type") == "message" and atext is not None, "anthropic message 200 (stop_reason %s)" % (a.get("stop_reason") if st == 200 else "?"))
    st, ev = sse(url, "/v1/messages", {**amsg, "stream": True})
    stext = "".join(e["delta"].get("text", "") for e in ev if e.get("type") == "content_block_delta")
    types = [e.get("type") for e in ev]
    check(st == 200 and types[:1] == ["message_start"] and "message_stop" in types and stext == atext,
          "anthropic message streamed: %d events, text equal to unstreamed" % len(ev))
    st, cp = request(url, "POST", "/v1/completions", {"model": mid, "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0})
    check(st == 200 and cp.get("choices") and isinstance(cp["choices"][0].get("text"), str), "completions 200")

    # 3. concurrency: prompts of different lengths, greedy / sampled, streamed / not
    prompts = ["Tell me about %s." % w for w in ["rivers", "the moon", "a very long and winding road through the mountains " * 6, "bread",
                                                 "numbers " * 40, "cats", "the history of computing " * 12, "tea"]]
    alone = {}
    for i, p in enumerate(prompts):
        st, r = request(url, "POST", "/v1/chat/completions", {"model": mid, "messages": [{"role": "user", "content": p}], "max_tokens": 40, "temperature": 0})
        alone[i] = chat_text(r) if st == 200 else None
    results = [None] * conc

    def worker(k):
        i = k % len(prompts)
        body = {"model": mid, "messages": [{"role": "user", "content": prompts[i]}], "max_tokens": 40}
        sampled = k % 3 == 2
        if sampled:
            body.update(temperature=0.8, top_p=0.9, seed=1000 + k)
        else:
            body.update(temperature=0)
        try:
            if k % 2:
                st, ev = sse(url, "/v1/chat/completions", {**body, "stream": True})
                results[k] = (st, chat_stream_text(ev) if st == 200 else None, i, sampled)
            else:
                st, r = request(url, "POST", "/v1/chat/completions", body)
                results[k] = (st, chat_text(r), i, sampled)
        except Exception as e:  # noqa: BLE001 — a crash of the server shows here
            results[k] = (0, repr(e), i, sampled)

    t2 = time.time()
    ths = [threading.Thread(target=worker, args=(k,)) for k in range(conc)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    ok = sum(1 for r in results if r and r[0] == 200 and isinstance(r[1], str))
    same = sum(1 for r in results if r and r[0] == 200 and not r[3] and r[1] == alone[r[2]])
    ngreedy = sum(1 for r in results if r and not r[3])
    check(ok == conc, "%d concurrent requests: %d answered 200 with text (%.2f s)" % (conc, ok, time.time() - t2))
    print("info greedy answers under concurrency equal to the prompt's answer alone: %d of %d" % (same, ngreedy), flush=True)

    # 4. seeded sampling repeats alone
    sb = {"model": mid, "messages": msgs, "max_tokens": 32, "temperature": 1.0, "top_k": 50, "seed": 42}
    st1, r1 = request(url, "POST", "/v1/chat/completions", sb)
    st2, r2 = request(url, "POST", "/v1/chat/completions", sb)
    check(st1 == 200 and st2 == 200 and chat_text(r1) == chat_text(r2), "seeded sampled request twice: same text")

    # 5. a dropped stream, then bad requests
    st, ev = sse(url, "/v1/chat/completions", {"model": mid, "messages": msgs, "max_tokens": 400, "temperature": 0, "stream": True,
                                               "ignore_eos": True}, stop_after=3)
    time.sleep(1.0)
    st, mt = request(url, "GET", "/metrics")
    canc = re.search(r"^kiln_requests_cancelled_on_disconnect_total (\S+)$", mt, re.M) if isinstance(mt, str) else None
    check(canc is not None and float(canc.group(1)) >= 1, "dropped stream counted as cancelled (%s)" % (canc.group(1) if canc else "no metric"))
    st, r = request(url, "POST", "/v1/chat/completions", greedy)
    check(st == 200 and chat_text(r) == solo, "after the drop: the greedy request again, same text")
    st, r = request(url, "POST", "/v1/chat/completions", None, raw=b'{"model": "x", "messages": [')
    check(st == 400, "malformed JSON: %d" % st)
    st, r = request(url, "POST", "/v1/chat/completions", {**greedy, "temperature": 7})
    check(st == 400, "temperature 7: %d" % st)
    st, r = request(url, "GET", "/v1/nothing")
    check(st == 404, "unknown route: %d" % st)

    # 6. clean shutdown
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "hung"
    check(rc == 0, "SIGTERM: exit %s" % rc)
    err = [l for l in log if "error" in l.lower() or "abort" in l.lower()]
    print("info server log: %d lines, %d with error/abort%s" % (len(log), len(err), (": " + err[0].strip()) if err else ""), flush=True)
    print("serve_smoke: %d checks, %d failed" % (checks, fails), flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
