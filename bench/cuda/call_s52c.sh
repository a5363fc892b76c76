#!/bin/bash
# (session 53: KILN_CUDA_QD_AHEAD was measured and removed; this script is the record of the call. To rerun it,
# git apply bench/cuda/qd_ahead_s52.patch first.)
# call_s52c.sh — session 52, call_s52b.sh cut to what the device budget left (~950 s after four refused or
# taken-back starts): test_cuda_kernels' matmul subset (session 51's test_row_views, never run) and its prefill
# matmul subset (new test_qd_ahead, test_qd_fused, the weight cache), then KILN_CUDA_QD_AHEAD against the in-stream
# conversion — `kiln logits` md5 over 600 ids in 300-token chunks, 2048-token prefill tok/s (best of 3; the
# first run learns the order) alternating off / on — and, where time is left, decode at 8000 positions.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
# the two subsets side by side (separate processes on one GPU: the wall time of the longer)
( call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1; grep -i "qd ahead\|qd fused" /tmp/t_qgemm.log | head -20 >> "$S" ) &
call_t1 matmul KILN_CUDA_TEST_MATMUL_ONLY=1
grep -i "row view" /tmp/t_matmul.log | head -4 >> "$S"
wait
echo "tests done at $(el) s" >> "$S"
call_wait q06q4 l8q4
IDS=$(seq -s, 100 699)
for m in q06q4 l8q4; do
  [ $m = l8q4 ] && [ "$(el)" -gt 200 ] && break
  for v in 0 1; do
    KILN_CUDA_QD_AHEAD=$v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$IDS" --chunk 300 --out /tmp/lg.npy > /tmp/lg.log 2>&1
    echo "logits $m QD_AHEAD=$v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12) $(grep -i 'error\|ahead' /tmp/lg.log | head -2)" >> "$S"
  done
done
call_prefill_ab "q06q4" "2048" KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1 KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1
[ "$(el)" -lt 230 ] && call_prefill_ab "l8q4" "2048" KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1 KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1
echo "prefill done at $(el) s" >> "$S"
if [ "$(el)" -lt 260 ]; then
  timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 8000 --gen-tokens 64 --runs 1 --json 2>/dev/null | tail -1 > /tmp/lc.json
  echo "long l8q4 8000: $(grep -o '"decode_tok_s": [0-9.]*\|"kv_bytes_per_token": [0-9]*\|"decode_read_gb_s": [0-9.]*\|"decode_weight_gb_s": [0-9.]*\|"prefill_tok_s": [0-9.]*' /tmp/lc.json | tr '\n' ' ') at $(el) s" >> "$S"
fi
cat $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
cat "$S"
