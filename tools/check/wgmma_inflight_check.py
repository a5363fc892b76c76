# wgmma_inflight_check.py — static check of nvcc's PTX for wgmma register hazards (helper-h98,
# session 16). The registers of an issued wgmma.mma_async — its accumulators and, for the
# register-A form, its A fragments — belong to the tensor cores until a wgmma.wait_group retires
# its commit group; another instruction writing them (or reading the accumulators) in between
# is undefined behaviour that the C++ source does not show: nvcc may give two variables the
# same PTX registers. attention_wgmma.cu's first pipelined loop had exactly that (the softmax of
# tile j packed P into the registers the in-flight P·V of tile j-1 was reading). Dataflow over
# the basic blocks (a state = the committed-but-unretired groups), so an issue in one branch
# and a write after the join are seen. Usage:
#   nvcc -O3 -std=c++17 -arch=compute_90a -ptx -I src -o k.ptx src/backend/cuda/attention_wgmma.cu
#   python3 tools/check/wgmma_inflight_check.py k.ptx      (prints hazards per kernel; exit 1 if any)
import re, sys
txt = open(sys.argv[1]).read()
total = 0
def norm(ln): return ln.strip().lstrip('{').rstrip('}').strip()
for m in re.finditer(r'\.entry (\S+)\(', txt):
    name = m.group(1); start = m.end()
    nxt = txt.find('.entry', start); body = txt[start: nxt if nxt > 0 else len(txt)]
    lines = [norm(l) for l in body.split('\n')]
    # basic blocks
    blocks = []; cur = []
    for i, s in enumerate(lines):
        if re.match(r'\$L__\w+:', s) and cur:
            blocks.append(cur); cur = []
        cur.append(i)
    blocks.append(cur)
    labels = {}
    for b, idx in enumerate(blocks):
        ml = re.match(r'(\$L__\w+):', lines[idx[0]])
        if ml: labels[ml.group(1)] = b
    def succ(b):
        out = []; last = None
        for i in blocks[b]:
            s = lines[i]
            mb = re.search(r'\bbra(?:\.uni)?\s+(\$L__\w+)', s)
            if mb and 'WG_WAIT' not in s:
                out.append(labels[mb.group(1)]); last = s
            elif s: last = s
        if last is None or not (re.search(r'^bra', last) or last.startswith('ret') or last.startswith('exit')):
            if b + 1 < len(blocks): out.append(b + 1)
        return out
    def step(state, s, report):
        groups, cur = state
        if s.startswith('wgmma.mma_async'):
            regs = re.findall(r'\{([^}]*)\}', s)
            acc = frozenset(x.strip() for x in regs[0].split(','))
            a = frozenset(x.strip() for x in regs[1].split(',')) if len(regs) > 1 else frozenset()
            return (groups, (cur[0] | acc, cur[1] | a))
        if s.startswith('wgmma.commit_group'):
            return (groups + (cur,), (frozenset(), frozenset()))
        mw = re.match(r'wgmma.wait_group.sync.aligned (\d+)', s)
        if mw:
            n = int(mw.group(1)); return (groups[len(groups) - n:] if n else (), cur)
        if not s or s.startswith('//') or s.startswith('$L') or s.startswith('.reg') or s.startswith('wgmma'): return state
        fl = list(groups) + [cur]
        acc = frozenset().union(*[g[0] for g in fl]); a = frozenset().union(*[g[1] for g in fl])
        ops = re.findall(r'%[a-z]+\d+', s)
        if ops and (ops[0] in acc or ops[0] in a or (set(ops[1:]) & acc)): report(s)
        return state
    init = ((), (frozenset(), frozenset()))
    ins = {0: {init}}; work = [0]; bad = set()
    while work:
        b = work.pop()
        for st in list(ins.get(b, ())):
            for i in blocks[b]:
                st = step(st, lines[i], lambda s, i=i: bad.add((i, s)))
            for n in succ(b):
                S = ins.setdefault(n, set())
                if st not in S and len(S) < 64:
                    S.add(st); work.append(n)
    for i, s in sorted(bad)[:4]: print('  ', name[:50], i, s[:90])
    print(name, 'hazards', len(bad))
    total += len(bad)
sys.exit(1 if total else 0)
