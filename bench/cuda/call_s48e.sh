. bench/cuda/call_lib.sh
call_unpack build-lead/kiln-cuda.tar.xz
CS=/usr/local/cuda/bin/compute-sanitizer
KILN_CUDA_TEST_GEMV_ONLY=1 timeout 60 $CS --tool memcheck --print-limit 6 /tmp/k/test_cuda_kernels > /tmp/g.log 2>&1
grep -a -v "^=========     Host Frame\|^=========         in \|^=========     #" /tmp/g.log | head -80 >> $S
ls /tmp/s/ >> $S
KILN_CUDA_GRAPH=0 timeout 60 $CS --tool memcheck --print-limit 6 /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --prompt-tokens 300 --gen-tokens 6 --runs 1 > /tmp/b.log 2>&1
echo "rc=$?" >> $S; tail -15 /tmp/b.log >> $S
