#!/bin/bash
# call_s34b.sh — session 34, call 2 (refused; for the next session): the weight cache as landed (opt-in
# `--weight-cache-gb X|auto`, default off; the env KILN_CUDA_QDEQ_CACHE_GB overrides the budget per call) — tests (the
# prefill matmul subsets with test_qdeq_cache_small; test_cuda_shapes' llama-3-8b q4 against the CPU with the cache and
# with KILN_CUDA_QDEQ_CACHE_T=65, the kept copy's GEMM from 65 tokens), logits md5 cache on / off, prefill tok/s over
# prompt lengths (on, CACHE_T=65, off; qwen3-0.6b's small weights at 512 / 2048), the first prefill (the fill), the engine
# at c = 1, 64, 128 with `--weight-cache-gb auto` (its KV share and log line) against off, and a KV cache of a given size
# that leaves less than the auto budget (the engine shrinks it).
#   PACK_BINS="kiln test_cuda_kernels test_cuda_shapes"; run: bash bench/cuda/call_s34b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8 q06q8
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_t1 qwg_multi KILN_CUDA_TEST_QWG_MULTI_ONLY=1
ON=KILN_CUDA_QDEQ_CACHE_GB=20
for v in X=1 $ON "$ON KILN_CUDA_QDEQ_CACHE_T=65"; do
  env $v KILN_TEST_SHAPES_ONLY=3 timeout 200 /tmp/k/test_cuda_shapes > /tmp/shp.log 2>&1
  echo "shapes l8q4 $v rc=$? $(tail -1 /tmp/shp.log)" >> "$S"; grep -i "fail\|worst" /tmp/shp.log | head -4 >> "$S"
done
call_wait l8q4 l8q8 q06q4 q06q8
for a in "" "--weight-cache-gb auto"; do
  timeout 90 /tmp/k/kiln logits /tmp/s/l8q4 --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 $a --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits l8q4 chunk 300 [$a] rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12) $(grep -m1 'weight cache' /tmp/lg.log)" >> "$S"
done
echo "md5 done at $(el) s" >> "$S"
for v in X=1 $ON X=1 $ON; do
  echo "== first prefill l8q4 2048 $v $(env $v timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*')" >> $OUT/bench.txt
done
call_prefill_ab l8q4 "65 128 192 256" $ON "$ON KILN_CUDA_QDEQ_CACHE_T=65"
call_prefill_ab l8q8 "128 192 256" $ON "$ON KILN_CUDA_QDEQ_CACHE_T=65"
call_prefill_ab "l8q4 l8q8" 2048 X=1 $ON
call_prefill_ab "q06q4 q06q8" "512 2048" X=1 $ON   # small weights: kept from 2048 tokens only
echo "prefill done at $(el) s" >> "$S"
for a in "" "--weight-cache-gb auto" "--weight-cache-gb auto"; do
  echo "== conc l8q4 [$a]" >> $OUT/bench.txt
  timeout 200 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda \
    --concurrency 1,64,128 --prompt-tokens 128 --gen-tokens 128 --max-batch 128 $a --json 2>/tmp/conc.err | tail -1 |
    grep -o '"concurrency": [0-9]*\|"decode_tok_s": [0-9.]*\|"steady_decode_tok_s": [0-9.]*\|"ttft_mean_ms": [0-9.]*' | paste - - - - >> $OUT/bench.txt
  grep -m2 "KV cache\|weight cache" /tmp/conc.err >> $OUT/bench.txt
done
call_conc_env l8q4 "$ON KILN_CUDA_QDEQ_CACHE_T=65" 1,64,128
echo "conc done at $(el) s" >> "$S"
# a KV cache of a given size that leaves less than the auto budget: the engine shrinks the cache (one log line) and runs
timeout 120 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --concurrency 8 --prompt-tokens 2048 --gen-tokens 16 --kv-cache-gb 125 \
  --weight-cache-gb auto --json > /tmp/kv125.json 2> /tmp/kv125.err
echo "kv 125 GB rc=$? $(grep -o 'weight cache[^(]*' /tmp/kv125.err | head -2 | tr '\n' ' ')" >> "$S"
grep -i "stops at\|error" /tmp/kv125.err | head -3 >> "$S"
cat "$S" $OUT/bench.txt
