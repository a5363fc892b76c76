#!/bin/bash
# call_s34b.sh — session 34, call 2: the weight cache on by default (--weight-cache-gb auto: weights of 2^24+
# parameters) — tests (the prefill matmul subsets; test_cuda_shapes' llama-3-8b q4 against the CPU by default and with
# KILN_CUDA_QDEQ_CACHE_T=65, the kept copy's GEMM from 65 tokens), logits md5 cache on / off, prefill tok/s over
# prompt lengths (auto, CACHE_T=65, off; qwen3-0.6b's small weights at 512 / 2048 auto vs off), the first prefill
# (the fill) and the engine at c = 1, 64, 128.
#   PACK_BINS="kiln test_cuda_kernels test_cuda_shapes"; run: bash bench/cuda/call_s34b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth q8 l8q8 q06q8
call_synth q4 q06q4
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_t1 qwg_multi KILN_CUDA_TEST_QWG_MULTI_ONLY=1
for v in X=1 KILN_CUDA_QDEQ_CACHE_T=65; do
  env $v KILN_TEST_SHAPES_ONLY=3 timeout 200 /tmp/k/test_cuda_shapes > /tmp/shp.log 2>&1
  echo "shapes l8q4 $v rc=$? $(tail -1 /tmp/shp.log)" >> "$S"; grep -i "fail\|worst" /tmp/shp.log | head -4 >> "$S"
done
call_wait l8q4 l8q8 q06q4 q06q8
OFF=KILN_CUDA_QDEQ_CACHE_GB=0
for v in X=1 $OFF; do
  env $v timeout 90 /tmp/k/kiln logits /tmp/s/l8q4 --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 --out /tmp/lg.npy > /tmp/lg.log 2>&1
  echo "logits l8q4 chunk 300 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12) $(grep -m1 'weight cache' /tmp/lg.log)" >> "$S"
done
echo "md5 done at $(el) s" >> "$S"
for v in X=1 $OFF X=1 $OFF; do
  echo "== first prefill l8q4 2048 $v $(env $v timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 --json 2>/dev/null | tail -1 | grep -o '"prefill_tok_s": [0-9.]*')" >> $OUT/bench.txt
done
call_prefill_ab l8q4 "65 128 192 256" X=1 KILN_CUDA_QDEQ_CACHE_T=65
call_prefill_ab l8q8 "128 192 256" X=1 KILN_CUDA_QDEQ_CACHE_T=65
call_prefill_ab "l8q4 l8q8" 2048 X=1 $OFF
call_prefill_ab "q06q4 q06q8" "512 2048" X=1 $OFF   # small weights: kept from 2048 tokens only
echo "prefill done at $(el) s" >> "$S"
call_conc_env l8q4 X=1 1,64,128
call_conc_env l8q4 $OFF 1,64,128
call_conc_env l8q4 KILN_CUDA_QDEQ_CACHE_T=65 1,64,128
echo "conc done at $(el) s" >> "$S"
# a KV cache of a given size that leaves less than the cache's auto budget: the engine shrinks it (one log line) and runs
timeout 120 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --concurrency 8 --prompt-tokens 2048 --gen-tokens 16 --kv-cache-gb 125 \
  --json > /tmp/kv125.json 2> /tmp/kv125.err; echo "kv 125 GB rc=$? $(grep -o 'weight cache[^(]*' /tmp/kv125.err | head -2 | tr '\n' ' ')" >> "$S"
grep -i "stops at\|error" /tmp/kv125.err | head -3 >> "$S"
cat "$S" $OUT/bench.txt
