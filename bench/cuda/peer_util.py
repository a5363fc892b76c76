"""peer_util.py — what the peer scripts (peer_gemv.py, peer_attn.py) share: one kernel call timed
inside a CUDA graph, so that a call's time is its kernel's alone (no launch gaps)."""
import torch


def graph_time(fn, reps, rounds=5):
    """Seconds per call of fn(i): fn(0)..fn(reps-1) captured once in a CUDA graph on a side stream,
    replayed once to warm up, then the best of `rounds` timed replays divided by reps. The caller
    warms fn up outside the graph first (first-call setup must not be captured)."""
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            for i in range(reps):
                fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    best = None
    for _ in range(rounds):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        t = e0.elapsed_time(e1) * 1e-3 / reps
        best = t if best is None else min(best, t)
    return best
