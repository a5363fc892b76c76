#!/bin/bash
# call_s19g.sh — session 19: qwen3's q/k head norms inside the fused rope + decode attention kernel
# (KILN_CUDA_ATTN_NORM=0: the separate norm_rope_kv_kernel as before). The tests that cover it first
# (norm_rope_kv_attention bitwise the separate ops; the un-synced qwen3-like decode chain; the decode
# attention tests; parity), then combined.sh's batch-1 benches (MODELS/VARIANTS from the caller).
# (Written in session 19 as a patch; on main since session 20, where this call measured it: +5.3 %.)
#   run: MODELS=... VARIANTS=... bash bench/cuda/call_s19g.sh PKG
P=${1:?package}
mkdir -p /tmp/k /tmp/s && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
S=$OUT/pre.txt
t1() { local n=$1; shift; env "$@" timeout 150 /tmp/k/test_cuda_kernels > /tmp/t_$n.log 2>&1; echo "$n rc=$? $(tail -1 /tmp/t_$n.log)" >> $S; grep -i "fail" /tmp/t_$n.log | head -5 >> $S; }
t1 norm_rope KILN_CUDA_TEST_NORM_ROPE_ONLY=1
t1 x16_decode KILN_CUDA_TEST_X16_ONLY=decode
t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
timeout 60 /tmp/k/test_cuda_parity > /tmp/tp.log 2>&1; echo "parity rc=$? $(tail -1 /tmp/tp.log)" >> $S; grep -i fail /tmp/tp.log | head -5 >> $S
export TESTS=" "
bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> "$OUT/summary.txt"
tail -30 "$OUT/summary.txt"
