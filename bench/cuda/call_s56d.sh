#!/bin/bash
# call_s56d.sh — call_s56c.sh cut to what ~200 s of device time allows, most telling first: stream_chain on
# llama-3-8b's token, the GEMV tests with the ring on, qwen3-0.6b q4 batch-1 ring off / on, then llama-3-8b q4.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
timeout 60 $P/stream_chain llama 6 13 > $OUT/chain_llama.txt 2>&1
echo "== stream_chain llama rc=$?" >> "$S"; cat $OUT/chain_llama.txt >> "$S"
call_t1 gemv_ring KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1
grep "# gemv" /tmp/t_gemv_ring.log >> "$S"
call_wait q06q4
call_b1 q06q4 kiln X=1
call_b1 q06q4 kiln KILN_CUDA_GEMV_RING=1
cat $OUT/bench.txt >> "$S"
call_wait l8q4
call_b1 l8q4 kiln X=1
call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1
echo "done at $(el) s" >> "$S"
cat "$S"; cat $OUT/bench.txt
