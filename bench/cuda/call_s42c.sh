#!/bin/bash
# call_s42c.sh — session 42, call 3: test_qd_att16 with its chain back to back (call 2's version uploaded between the
# attention and o, which drops the producer's record), the prefill-matmul subset; qwen3-0.6b / llama-3-8b q4 prefill
# at 2048 with each of the two new defaults off, alternating.   kiln + test_cuda_kernels packed
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4 l8q4
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
grep "qd att16\|qd fused" /tmp/t_qgemm.log >> "$S"
call_wait q06q4 l8q4
call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QD_ATT16=0 KILN_CUDA_QD_BATCH=0 "KILN_CUDA_QD_ATT16=0 KILN_CUDA_QD_BATCH=0" X=1 KILN_CUDA_QD_ATT16=0 KILN_CUDA_QD_BATCH=0 "KILN_CUDA_QD_ATT16=0 KILN_CUDA_QD_BATCH=0"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cat "$S" $OUT/bench.txt
