# ring_protocol_sim.py — a model of gemv_tcr_kernel's ring protocol (matmul_gemv_tc.cu), run under random
# interleavings: one producer lane walking the block's items into NS slots, TCR_NCW consumer warps walking the same
# order (each taking its own (group, warp) items, the group's two tile-end barriers a round), full / empty mbarriers with
# PTX's parity rule (try_wait.parity P succeeds once the barrier's completed-phase count has the other parity), the
# per-slot tag (or KILN_CUDA_GEMV_RING_PW's per-warp slots, which need none), and TMA copies that land at random later times (the slot reads "garbage" until then).
# It checks every consumer reads its own item's bytes and that nothing hangs; with the tags off it reproduces session
# 57's failure (a warp accepting the older phase of a slot whose next fill is still in flight).
#   python3 bench/cuda/ring_protocol_sim.py [SEEDS]   (300 seeds: ~3 min; prints the bad runs of each protocol)
# A model, not the kernel: it checks the order and the waits, not the PTX memory model or the arithmetic.
# History: this models the protocol of sessions 56–58 (a slot an item, shared by all consumer warps). Since session 59
# the kernel's slot is a quad of 4 chunks taken by a set of 4 warps, each set with its own half of the ring in its own
# order — the per-warp-slot case below lifted to sets (every fill of a slot goes to one set, parity alone suffices).
import random, sys
def walk(ntl, ng, ipt, S, nchunks):  # (k, group, warp, tile, chunk) in the order both sides walk
    k = 0; out = []
    for r0 in range(0, ntl, ng):
        nr = min(ng, ntl - r0)
        for jj in range(ipt):
            for gr in range(nr):
                for w in range(S):
                    ch = w + jj * S
                    if ch >= nchunks: continue
                    out.append((k, gr, w, r0 + gr, ch)); k += 1
    return out
def run(K, ntiles, Gb, b, S, NS, CHUNK, seed, use_tag=True, pw=False):
    rnd = random.Random(seed)
    NCW = 8; ng = NCW // S; nchunks = (K + CHUNK - 1) // CHUNK; ipt = (nchunks + S - 1) // S
    ntl = (ntiles - 1 - b) // Gb + 1 if ntiles > b else 0
    items = walk(ntl, ng, ipt, S, nchunks)
    # consumer warp (grp, w) items, in order; also each warp's round ends (tc_bar of its group)
    fullph = [0]*NS; fullarr = [0]*NS; fulltx = [0]*NS; emptyph = [0]*NS
    tag = [-1]*NS; data = [None]*NS; inflight = []
    def full_step(s):
        if fullarr[s] == 1 and fulltx[s] == 0: fullph[s] += 1; fullarr[s] = 0
    nsw = NS // NCW
    def slot(k, cw, cnt):  # tcr_claim's slot and use number (pw: the warp's own slots)
        if pw:
            j = cnt[cw]; cnt[cw] += 1
            return cw * nsw + j % nsw, j // nsw
        return k % NS, k // NS
    def producer():
        cnt = [0] * NCW
        for (k, gr, w, tile, ch) in items:
            s, use = slot(k, gr * S + w, cnt)
            if use > 0:
                par = (use - 1) & 1
                while emptyph[s] % 2 == par: yield
            if use_tag: tag[s] = k  # (pw: the consumer is run without tags)
            fullarr[s] = 1; fulltx[s] = 1; data[s] = 'garbage'
            inflight.append((s, k)); yield
    arrived = {}
    def consumer(grp, w):
        cnt = [0] * NCW
        rounds = range(0, ntl, ng)  # r0 of each round
        for r0 in rounds:
          for (k, gr, ww, tile, ch) in items:
            if tile - gr != r0: continue
            if gr == grp and ww == w:
                s, use = slot(k, grp * S + w, cnt)
                if use_tag:
                    while tag[s] != k: yield
                par = use & 1
                while fullph[s] % 2 == par: yield
                if data[s] != k: raise Exception(f"warp {grp},{w} item {k} slot {s} read {data[s]}")
                yield
                emptyph[s] += 1
          nr = min(ng, ntl - r0)  # tiles of this round
          if grp < nr:  # the group's tile end: tc_bar(grp, S) twice
            for rep in range(2):
                key = (grp, r0, rep); arrived[key] = arrived.get(key, 0) + 1
                while arrived[key] < S: yield
        return
    gens = [producer()] + [consumer(g, w) for g in range(ng) for w in range(S)]
    alive = list(range(len(gens))); steps = 0
    while alive or inflight:
        steps += 1
        if steps > 2_000_000: raise Exception("hang")
        if inflight and rnd.random() < 0.3:
            i = rnd.randrange(len(inflight)); s, k = inflight.pop(i)
            data[s] = k; fulltx[s] = 0; full_step(s); continue
        if not alive: continue
        j = rnd.choice(alive)
        try: next(gens[j])
        except StopIteration: alive.remove(j)
    return len(items)
def sweep(name, slots, verbose, **proto):
    """run the protocol on SEEDS random shapes (K, tiles, grid, block, slots, chunk); print the bad runs if verbose"""
    bad = 0
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 200):
        rnd = random.Random(seed)
        K = rnd.choice([1024, 2048, 3072, 4096, 8192, 14336]); S = 8 if K >= 8192 else 4
        ntiles = rnd.choice([8, 64, 200, 1000]); Gb = rnd.choice([1, 3, 132]); b = rnd.randrange(min(Gb, ntiles))
        NS = rnd.choice(slots); CHUNK = rnd.choice([512, 256])
        try: run(K, ntiles, Gb, b, S, NS, CHUNK, seed, **proto)
        except Exception as e:
            bad += 1
            if verbose: print(name, seed, K, ntiles, Gb, b, S, NS, CHUNK, e)
    print(f"{name}: bad {bad}")
sweep("tag protocol", [4, 5, 7, 13, 32], True, use_tag=True)
sweep("without tags (session 57's first run)", [4, 5, 7, 13, 32], False, use_tag=False)
sweep("per-warp slots, no tags (KILN_CUDA_GEMV_RING_PW=1)", [8, 11, 13, 16, 32], True, use_tag=False, pw=True)
