# call_lib.sh — what session scripts for a device call share (sourced: `. bench/cuda/call_lib.sh PKG`):
# unpack the package into /tmp/k, write checkpoints in the background while tests run, and run a
# test_cuda_kernels subset into $OUT/pre.txt. combined.sh skips a checkpoint these already wrote.
#   call_unpack PKG            /tmp/k with LD_LIBRARY_PATH set; S=$OUT/pre.txt (its first line the GPU's name); el: seconds since
#   call_synth_2l DTYPE NAME...   the same at 2 layers (q… qwen3-0.6b, l… llama-3-8b), for ncu and sanitizer runs
#   call_synth DTYPE NAME...   kiln synth of each NAME (l8… = llama-3-8b, q06… = qwen3-0.6b, q352… = qwen3.5-2b,
#                              g31… = gemma3-1b, moe4… = qwen3.5-moe-35b at 4 layers) into /tmp/s/NAME
#   call_san TOOL TO NAME [VAR=V...] -- CMD   compute-sanitizer's summary and first reports of CMD into $S
#   call_t1 NAME [VAR=V...]    test_cuda_kernels with that environment: its last line and failures into $S (T1_TIMEOUT=S: its
#                              limit, default 200 s)
#   call_ring_t1s              the ring GEMV's stress tests through call_t1 (60 s each): the suite's 48 repetitions, 384
#                              with the fence, 384 without it (which session 60 saw fail)
#   call_tl NAME TAG VAR=V...  the decode timeline (a package whose kiln is a -DKILN_CUDA_TIMELINE=ON build) of /tmp/s/NAME
#                              under that environment (X=1 for none): 2048 + 16 tokens, graphs on; bench/cuda/timeline.py's
#                              last TL_SHOW launches (default 60) into $OUT/tl_NAME_TAG.txt, its last TL_TAIL lines
#                              (default 12: the class summary) into $S
#   call_hybrid_tests "DT:NAME..." [TNAME VAR=V]   the hybrid calls' preamble: those checkpoints in the background,
#                              the MoE/hybrid subset of test_cuda_kernels (and again as TNAME under VAR=V),
#                              test_cuda_hybrid and test_cuda_parity, then wait for the checkpoints
#   call_ncu_decode NAME       ncu kernel times of a short graph-less run of /tmp/s/NAME (16 + 4 tokens), summed per
#                              kernel by ncu_sum.py into $OUT/ncu_decode.txt
#   call_full_tests            qwen3.5-2b bf16, qwen3.5-moe-35b q4 (4 layers), gemma3-1b bf16 one after another in the
#                              background, the whole test_cuda_kernels beside test_cuda_hybrid/parity/sample, then wait
#   call_tbin BIN...           whole test binaries one after another (300 s each): last line and failures into $S
#                              (kiln-tiny's, whose weights a call does not carry, left out of the failure lines)
#   call_logits CKPT "BIN VAR=V[,VAR=V]"...   md5 of `kiln logits` over 24 decode steps (--chunk 1, ids $IDS) per binary
#                              (LG_CHUNK=N: prefill chunks of N instead; LG_TIMEOUT=S: each run's limit, default 60)
#                              and environment into $S: a bitwise check across fused / separate paths and trees
#   call_b1 NAME BIN VAR=V     batch-1 decode tok/s at 2048 positions of /tmp/s/NAME into $OUT/bench.txt
#   call_b1s NAME VAR=V...     the same (kiln) with the step stats line (host issue / GPU wait a step)
#   call_b1s_ab R "NAME..." V...   call_b1s in R alternating rounds over the models and variants (a variant: quoted VAR=V list)
#   call_ring_tests            the GEMV tests with KILN_CUDA_GEMV_RING=1 into $OUT/t_ring.log, summary into $S, RC
#   call_conc NAME BIN...      /tmp/s/NAME through the engine at concurrency 1, 8, 64 (128-token prompts, 64 generated)
#   call_conc128 NAME BIN [VAR=V] [ARGS]   the same at the issue's 128 + 128, with TTFT and ITL, an environment and
#                              extra bench arguments (e.g. "--step-tokens 8192")
#   call_conc_ab R NAME LEVELS V...   the same protocol per variant (VAR=V, X=1 for none, or bin:NAME), counted (steady)
#                              tok/s, TTFT and ITL a level, one line each into $S
#   call_conc_env NAME VAR=V LEVELS   the issue table's protocol (128 + 128, --max-batch 128 --kv-cache-gb 16) at the
#                              given concurrency levels under one environment, with TTFT and ITL (X=1 for none)
#   call_qwgbench BIN...       KILN_CUDA_TEST_QWG_BENCH of each test binary: v8's µs a matmul at 64 tokens into $OUT/qwgbench.txt
#   call_logits_chunks CKPTS CHUNKS BIN...   md5 of `kiln logits` over 64 ids at each prefill chunk size, per binary, into $S
#   call_ncu_prefill NAME VAR=V  ncu kernel times of one 2048-token prefill (+ 2 decode steps) of /tmp/s/NAME under that
#                              environment (X=1 for none), summed per kernel by ncu_sum.py, appended to $OUT/ncu.txt
#   call_md5_ab "CKPTS" "CHUNKS"   md5 of `kiln logits` (ids $IDS) of kiln-base and kiln per checkpoint and prefill chunk into $S
#   call_prefill NAME BIN RUNS   prefill tok/s of a 2048-token prompt (best of RUNS) into $OUT/bench.txt
#   call_b1_widen NAME...     batch-1 decode / prefill (2048 + 128, --runs 2) of each /tmp/s/NAME at the default widening
#                              (widen.cu) and with KILN_CUDA_WIDEN=0, one line each into $S
#   call_sass FUN...           cuobjdump -sass of kernels (mangled names) of /tmp/k/kiln into $OUT/sass_*.txt
call_unpack() {
  local p=$1
  [ -d "$p" ] && p=$p/kiln-cuda.tar.xz # the package's folder given: its one file
  mkdir -p /tmp/k /tmp/s && tar xJf "$p" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
  S=$OUT/pre.txt
  T0=$(date +%s)
  nvidia-smi --query-gpu=name --format=csv,noheader >> "$S" 2>&1 # which card: timings compare only on the same one
}
el() { echo $(( $(date +%s) - T0 )); } # seconds since call_unpack
call_synth() {
  local dt=$1 m pr; shift
  for m in "$@"; do
    local ly=""
    case $m in l8*) pr=llama-3-8b;; q352*) pr=qwen3.5-2b;; g31*) pr=gemma3-1b;; moe4*) pr=qwen3.5-moe-35b; ly="--layers 4";; *) pr=qwen3-0.6b;; esac
    rm -f /tmp/s/$m.done   # a warm machine keeps /tmp/s: a done file from a failed earlier call must not count
    ( /tmp/k/kiln synth --preset $pr --dtype "$dt" $ly --out /tmp/s/$m > /tmp/s/synth-$m.log 2>&1; touch /tmp/s/$m.done ) &
  done
}
# 2-layer synths for ncu / sanitizer runs, in the background like call_synth: call_synth_2l DTYPE NAME...
# (NAME q… qwen3-0.6b, l… llama-3-8b; wait with call_wait NAME)
call_synth_2l() {
  local dt=$1 m pr; shift
  for m in "$@"; do
    case $m in l*) pr=llama-3-8b;; *) pr=qwen3-0.6b;; esac
    rm -f /tmp/s/$m.done
    ( /tmp/k/kiln synth --preset $pr --dtype "$dt" --layers 2 --out /tmp/s/$m > /dev/null 2>&1; touch /tmp/s/$m.done ) &
  done
}
# compute-sanitizer over one command, one line into $S (tool, name, ERROR SUMMARY, the check count) and its first
# reports:  call_san TOOL TIMEOUT NAME [VAR=V...] -- CMD...   (X=1 for no environment)
call_san() {
  local tool=$1 to=$2 name=$3 e=(); shift 3
  while [ "$1" != "--" ]; do e+=("$1"); shift; done; shift
  env "${e[@]}" timeout $to /usr/local/cuda/bin/compute-sanitizer --tool $tool --print-limit 8 "$@" > /tmp/san_$name.log 2>&1
  echo "== $tool $name rc=$? at $(el) s: $(grep -a 'ERROR SUMMARY\|RACECHECK SUMMARY' /tmp/san_$name.log | tail -1) | $(grep -a 'checks,' /tmp/san_$name.log | tail -1)" >> "$S"
  grep -a -A6 "^========= [A-Z][a-z]" /tmp/san_$name.log | grep -a -v "Host Frame\|Saved host" | head -14 >> "$S"
}
call_t1() {
  local n=$1; shift
  env "$@" timeout "${T1_TIMEOUT:-200}" /tmp/k/test_cuda_kernels > /tmp/t_$n.log 2>&1
  echo "$n rc=$? $(tail -1 /tmp/t_$n.log)" >> "$S"
  grep -i "fail" /tmp/t_$n.log | head -8 >> "$S"
}
call_ring_t1s() {
  T1_TIMEOUT=60 call_t1 ring_suite48 KILN_CUDA_TEST_RING_ONLY=1
  T1_TIMEOUT=60 call_t1 ring_stress384 KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=384
  T1_TIMEOUT=60 call_t1 ring_stress384_NO_FENCE_must_fail KILN_CUDA_GEMV_RING_FENCE=0 KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=384
}
call_tl() {
  local m=$1 tag=$2; shift 2
  env "$@" KILN_CUDA_TIMELINE=/tmp/tl_${m}_$tag.bin timeout 120 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 \
    --gen-tokens 16 --runs 1 > /tmp/tlb_${m}_$tag.log 2>&1
  echo "== tl $m $tag rc=$? $(grep -a 'decode:' /tmp/tlb_${m}_$tag.log) $(grep -a TIMELINE /tmp/tlb_${m}_$tag.log | tail -1)" >> "$S"
  python3 bench/cuda/timeline.py /tmp/tl_${m}_$tag.bin "${TL_SHOW:-60}" > $OUT/tl_${m}_$tag.txt 2>&1
  tail -"${TL_TAIL:-12}" $OUT/tl_${m}_$tag.txt >> "$S"
}
call_tbin() {
  local t
  for t in "$@"; do
    timeout 300 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)" >> "$S"
    grep -i "fail" /tmp/$t.log | grep -v kiln-tiny | head -8 >> "$S"
  done
}
call_logits() {
  local ck=$1 v; shift
  for v in "$@"; do
    set -- $v
    env ${2//,/ } timeout "${LG_TIMEOUT:-60}" /tmp/k/$1 logits "$ck" --backend cuda --ids "$IDS" --chunk "${LG_CHUNK:-1}" --out /tmp/lg.npy > /tmp/lg.log 2>&1
    echo "logits ${ck##*/} $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
  done
}
# batch-1 decode tok/s as call_b1 (NAME VAR=V...: any number of assignments, X=1 for none) and the backend's step
# stats line (KILN_CUDA_STEP_STATS=1: host issuing / GPU wait a step) into $OUT/bench.txt
call_b1s() {
  local m=$1; shift
  echo "== $m $*" >> $OUT/bench.txt
  env "$@" KILN_CUDA_STEP_STATS=1 timeout 60 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json \
    2>/tmp/b1.err | tail -1 | grep -o '"decode_tok_s": [0-9.]*' >> $OUT/bench.txt
  grep -i "issu" /tmp/b1.err | tail -1 | sed 's/.*issuing/  issuing/' >> $OUT/bench.txt
}
# call_b1s in alternating rounds: call_b1s_ab ROUNDS "NAME..." VARIANT... — per round, per model, each VARIANT (a quoted
# list of VAR=V assignments, X=1 for none) in the order given (then "b1 done at N s" into $S)
call_b1s_ab() {
  local rounds=$1 ms=$2 r m v
  shift 2
  for r in $(seq "$rounds"); do
    for m in $ms; do
      for v in "$@"; do call_b1s $m $v; done
    done
  done
  echo "b1 done at $(el) s" >> "$S"
}
# the batch-1 q4/q8 GEMV tests with the ring GEMV on (KILN_CUDA_TEST_GEMV_ONLY, 45 s cap: a hang shows as rc 124) into
# $OUT/t_ring.log, their summary into $S; RC its exit status
call_ring_tests() {
  KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1 timeout 45 /tmp/k/test_cuda_kernels > $OUT/t_ring.log 2>&1
  RC=$?
  echo "ring rc=$RC at $(el) s $(tail -1 $OUT/t_ring.log)" >> $S
  grep -i "fail\|# gemv" $OUT/t_ring.log | head >> $S
}
call_b1() {
  echo "== $1 $2 $3" >> $OUT/bench.txt
  env $3 timeout 60 /tmp/k/$2 bench /tmp/s/$1 --backend cuda --prompt-tokens 2048 --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 |
    grep -o '"decode_tok_s": [0-9.]*' >> $OUT/bench.txt
}
call_conc() {
  local m=$1 bin; shift
  for bin in "$@"; do
    echo "== conc $m $bin" >> $OUT/bench.txt
    timeout 150 /tmp/k/$bin bench /tmp/s/$m --backend cuda --concurrency 1,8,64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null |
      tail -1 | grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*' | paste - - - >> $OUT/bench.txt
  done
}
call_conc128() {
  echo "== conc $1 $2 $3 $4" >> $OUT/bench.txt
  env $3 timeout 150 /tmp/k/$2 bench /tmp/s/$1 --backend cuda --concurrency 1,8,64 --prompt-tokens 128 --gen-tokens 128 --max-batch 64 $4 --json 2>/dev/null |
    tail -1 | grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*\|"itl_mean_ms": [0-9.]*' |
    paste - - - - - >> $OUT/bench.txt
}
call_qwgbench() {
  local b
  for b in "$@"; do
    KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/$b 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | sed "s/^/$b /" >> $OUT/qwgbench.txt
  done
}
call_logits_chunks() {
  local m ch b ms=$1 chs=$2 ids
  shift 2
  ids=$(seq -s, 10 73)
  for m in $ms; do
    for ch in $chs; do
      for b in "$@"; do
        timeout 60 /tmp/k/$b logits $m --backend cuda --ids "$ids" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
        echo "logits ${m##*/} chunk $ch $b rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
      done
    done
  done
}
call_sass() {
  local f
  command -v cuobjdump > /dev/null || return 0
  for f in "$@"; do cuobjdump -sass -fun "$f" /tmp/k/kiln | awk '/Function :/,0' > $OUT/sass_${f:4:12}.txt 2>&1; done
}
call_hybrid_tests() {
  local c ns=""
  for c in $1; do call_synth "${c%%:*}" "${c#*:}"; ns="$ns ${c#*:}"; done
  call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
  [ -n "$2" ] && call_t1 "$2" KILN_CUDA_TEST_MOE_ONLY=1 "$3"
  call_tbin test_cuda_hybrid test_cuda_parity
  for c in $ns; do while [ ! -f /tmp/s/$c.done ]; do sleep 1; done; done
  echo "tests + synth done at $(el) s" >> "$S"
}
call_full_tests() {
  ( /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1
    /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1
    /tmp/k/kiln synth --preset gemma3-1b --dtype bf16 --out /tmp/s/g31bf16 > /tmp/s/synth-g3.log 2>&1; touch /tmp/s/all.done ) &
  ( timeout 420 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1; echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log) (at $(el) s)" > /tmp/tk.sum
    grep -i fail /tmp/tk.log | head -10 >> /tmp/tk.sum ) &
  local tk=$!
  call_tbin test_cuda_hybrid test_cuda_parity test_cuda_sample
  wait $tk; cat /tmp/tk.sum >> "$S"
  echo "tests done at $(el) s" >> "$S"
  while [ ! -f /tmp/s/all.done ]; do sleep 1; done
}
call_ncu_decode() {
  KILN_CUDA_GRAPH=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/$1 --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > $OUT/ncu_q.csv 2>/tmp/ncu.err
  python3 bench/cuda/ncu_sum.py $OUT/ncu_q.csv > $OUT/ncu_decode.txt 2>&1
  echo "ncu done at $(el) s" >> "$S"
}
call_ncu_prefill() {
  env $2 timeout 150 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/$1 --backend cuda --prompt-tokens 2048 --gen-tokens 2 \
    --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
  echo "=== ncu $1 $2 rc=$?" >> $OUT/ncu.txt
  python3 bench/cuda/ncu_sum.py /tmp/ncu.csv 2>&1 | head -40 >> $OUT/ncu.txt
}
call_md5_ab() {
  local m ch
  for m in $1; do
    for ch in $2; do
      timeout 60 /tmp/k/kiln-base logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/a.npy > /dev/null 2>&1
      timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk $ch --out /tmp/b.npy > /dev/null 2>&1
      echo "logits $m chunk $ch base $(md5sum < /tmp/a.npy | cut -c1-12) new $(md5sum < /tmp/b.npy | cut -c1-12)" >> "$S"
    done
  done
}
call_prefill() {
  echo "== prefill $1 $2 $(timeout 60 /tmp/k/$2 bench /tmp/s/$1 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs $3 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*')" >> $OUT/bench.txt
}
# prefill tok/s of each model at each prompt length under each environment (VAR=V[,VAR=V]; X=1 for none), best of 3 runs:
#   call_prefill_ab "l8q4 q06q4" "65 128 256" X=1 KILN_CUDA_QWG_SLICE=0
call_prefill_ab() {
  local m p v ms=$1 ps=$2
  shift 2
  for m in $ms; do
    for p in $ps; do
      for v in "$@"; do
        echo "== prefill $m $p $v $(env ${v//,/ } timeout 60 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens $p --gen-tokens 4 --runs 3 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*')" >> $OUT/bench.txt
      done
    done
  done
}
# wait for call_synth's checkpoints:  call_wait l8q4 q06q4
call_wait() {
  local m
  for m in "$@"; do while [ ! -f /tmp/s/$m.done ]; do sleep 1; done; done
  echo "synth done at $(el) s" >> "$S"
}
# the issue table's concurrency protocol at the given levels (128-token prompts, 128 generated, --max-batch 128
# --kv-cache-gb 16), under one environment (VAR=V; X=1 for none):  call_conc_env l8q4 KILN_CUDA_QWG_128=0 1,64,128
call_conc_env() {
  echo "== conc $1 $2" >> $OUT/bench.txt
  env $2 timeout 200 /tmp/k/kiln bench /tmp/s/$1 --backend cuda --concurrency $3 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json 2>/tmp/conc.err | tail -1 |
    grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*\|"itl_mean_ms": [0-9.]*' |
    paste - - - - - >> $OUT/bench.txt
  grep -i "error\|fail" /tmp/conc.err | head -3 >> $OUT/bench.txt
}
# base vs new, each twice: 2048-token prefill of llama-3-8b q4 / q8 (call_prefill, best of 2) and the engine's concurrency
# protocol on llama-3-8b q4 (call_conc128), with the package's kiln-base and kiln:  call_base_new_ab
call_base_new_ab() {
  local i m b
  for i in 1 2; do
    for m in l8q4 l8q8; do
      for b in kiln-base kiln; do call_prefill $m $b 2; done
    done
  done
  for i in 1 2; do
    call_conc128 l8q4 kiln-base X=1 "--max-batch 128 --kv-cache-gb 16"
    call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
  done
}
# md5 of `kiln logits` of 200 ids per model, chunk and environment (VAR=V; X=1 for none):
#   call_logits_md5 "l8q4 q06q4" "100 128" X=1 KILN_CUDA_QWG_128=0
call_logits_md5() {
  local m ch v ms=$1 chs=$2
  shift 2
  for m in $ms; do
    for ch in $chs; do
      for v in "$@"; do
        env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 209)" --chunk $ch --out /tmp/lg.npy > /tmp/lg.log 2>&1
        echo "logits $m chunk $ch $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
      done
    done
  done
}
# engine A/B at the issue's 128 + 128 (--max-batch 128 --kv-cache-gb 16), one line per variant into $S: counted (steady)
# tok/s, TTFT and ITL per level. A variant is an environment (VAR=V; X=1 for none) or bin:NAME (a package binary):
#   call_conc_ab 1 l8q4 2,3,8 X=1 KILN_CUDA_QWG_S16=0        call_conc_ab 2 q06q4 1,2 bin:kiln-base bin:kiln
call_conc_ab() {
  local r=$1 m=$2 lv=$3 v b e
  shift 3
  for v in "$@"; do
    b=kiln; e=X=1
    case $v in bin:*) b=${v#bin:};; *) e=$v;; esac
    env $e /tmp/k/$b bench /tmp/s/$m --backend cuda --concurrency $lv --prompt-tokens 128 --gen-tokens 128 \
      --max-batch 128 --kv-cache-gb 16 --json > /tmp/c.json 2>/tmp/c.err
    python3 - "$m $v r$r" >> $S <<'PY' || tail -3 /tmp/c.err >> $S
import json,sys
d=json.load(open('/tmp/c.json'))
print(sys.argv[1], ' '.join('c=%d %.1f (%.1f) ttft %.1f itl %.2f' % (x['concurrency'], x['decode_tok_s'], x['steady_decode_tok_s'], x['ttft_mean_ms'], x['itl_mean_ms']) for x in d))
PY
  done
}
call_b1_widen() {
  local m v
  for m in "$@"; do
    for v in "" 0; do
      echo "== b1 $m widen=${v:-default} $(KILN_CUDA_WIDEN=$v timeout 90 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 \
        --gen-tokens 128 --runs 2 --json 2>/dev/null | tail -1 |
        grep -o '"prefill_tok_s": [0-9.]*\|"decode_tok_s": [0-9.]*\|"weight_bytes": [0-9]*' | tr '\n' ' ')" >> "$S"
    done
  done
}
