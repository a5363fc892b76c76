#!/bin/bash
# (session 53: KILN_CUDA_QD_AHEAD was measured and removed; this script is the record of the call. To rerun it,
# git apply bench/cuda/qd_ahead_s52.patch first.)
# call_s52d.sh — session 52's last try on ~300 s of budget: only test_cuda_kernels' matmul subset (session 51's
# test_row_views) and prefill-matmul subset (test_qd_ahead, KILN_CUDA_QD_AHEAD against the in-stream conversion on a
# 2-layer prefill, bitwise) side by side, each cut at 170 s.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( env KILN_CUDA_TEST_QGEMM_ONLY=1 timeout 170 /tmp/k/test_cuda_kernels > /tmp/t_qgemm.log 2>&1; echo "qgemm rc=$? $(tail -1 /tmp/t_qgemm.log)" > /tmp/q.sum
  grep -i "fail" /tmp/t_qgemm.log | head -8 >> /tmp/q.sum; grep -i "qd ahead" /tmp/t_qgemm.log | head -16 >> /tmp/q.sum ) &
env KILN_CUDA_TEST_MATMUL_ONLY=1 timeout 170 /tmp/k/test_cuda_kernels > /tmp/t_matmul.log 2>&1
echo "matmul rc=$? $(tail -1 /tmp/t_matmul.log)" >> "$S"
grep -i "fail" /tmp/t_matmul.log | head -8 >> "$S"; grep -i "row view" /tmp/t_matmul.log | head -4 >> "$S"
wait; cat /tmp/q.sum >> "$S"
echo "done at $(el) s" >> "$S"
cat "$S"
