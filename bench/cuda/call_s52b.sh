#!/bin/bash
# (session 53: KILN_CUDA_QD_AHEAD was measured and removed; this script is the record of the call. To rerun it,
# git apply bench/cuda/qd_ahead_s52.patch first.)
# call_s52b.sh — session 52: the whole CUDA suite at the tree (session 51's test_row_views never ran; new
# test_qd_ahead), then KILN_CUDA_QD_AHEAD (matmul_dequant.cu: the next group's weights converted to f16 on a side
# stream) against the in-stream conversion — `kiln logits` md5 over 600 ids in 300-token chunks (the second chunk
# reads weights converted ahead), and 2048-token prefill tok/s (best of 3 runs; the first run learns the order)
# alternating off / on, qwen3-0.6b q4 and llama-3-8b q4, then llama-3-8b q4 at 512 tokens.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
( timeout 420 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1; echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log) (at $(el) s)" > /tmp/tk.sum
  grep -i "fail" /tmp/tk.log | head -10 >> /tmp/tk.sum; grep -i "qd ahead\|row view" /tmp/tk.log | head -24 >> /tmp/tk.sum ) &
tk=$!
call_tbin test_cuda_hybrid test_cuda_parity test_cuda_sample test_cuda_shapes
wait $tk; cat /tmp/tk.sum >> "$S"
echo "tests done at $(el) s" >> "$S"
call_wait q06q4 l8q4
IDS=$(seq -s, 100 699)
for m in q06q4 l8q4; do LG_CHUNK=300 LG_TIMEOUT=120 call_logits /tmp/s/$m "kiln KILN_CUDA_QD_AHEAD=0" "kiln KILN_CUDA_QD_AHEAD=1"; done
call_prefill_ab "q06q4 l8q4" "2048" KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1 KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1
call_prefill_ab "l8q4" "512" KILN_CUDA_QD_AHEAD=0 KILN_CUDA_QD_AHEAD=1
# what time is left: the ceilings, then batch-1 decode at 8000 positions (never measured on CUDA)
if [ "$(el)" -lt 480 ]; then timeout 40 /tmp/k/kiln-cuda-probe > $OUT/probe.jsonl 2>&1; echo "probe at $(el) s" >> "$S"; fi
if [ "$(el)" -lt 520 ]; then
  timeout 60 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 8000 --gen-tokens 64 --runs 1 --json 2>/dev/null | tail -1 > /tmp/lc.json
  echo "long l8q4 8000: $(grep -o '"decode_tok_s": [0-9.]*\|"kv_bytes_per_token": [0-9]*\|"decode_read_gb_s": [0-9.]*\|"decode_weight_gb_s": [0-9.]*' /tmp/lc.json | tr '\n' ' ') at $(el) s" >> "$S"
fi
cat $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
cat "$S"
