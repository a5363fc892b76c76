#!/bin/bash
# call_s50b.sh — session 50: call 1 (call_s50a.sh) had racecheck hazards on the 4-bit wgmma matmul with the default
# fill AND with KILN_CUDA_QWG_FILLWAIT=1 (the latter only write-after-read: a consumer's code read, then the producer's
# refill). The consumers release a stage by __syncwarp and one arrive from lane 0. bench/cuda/qwg_allarrive_s50.patch
# adds KILN_CUDA_QWG_FILLWAIT=2: the wait_group fill and every consumer lane arriving on the empty barrier. Clean under
# it: racecheck does not carry __syncwarp's ordering into lane 0's release (the tool); hazards still: the kernel.
# Package: PATCH=bench/cuda/qwg_allarrive_s50.patch build_here.sh ... test_cuda_kernels; PACK_BINS="test_cuda_kernels".
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_t1 qwgq_fw2 KILN_CUDA_TEST_QWG_ONLY=quick KILN_CUDA_QWG_FILLWAIT=2
call_t1 qwg_fw2 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_FILLWAIT=2
call_san racecheck 120 qwgq_fw2_race KILN_CUDA_TEST_QWG_ONLY=quick KILN_CUDA_QWG_FILLWAIT=2 -- /tmp/k/test_cuda_kernels
call_san racecheck 120 qwgq_race KILN_CUDA_TEST_QWG_ONLY=quick -- /tmp/k/test_cuda_kernels
grep -a "Race reported\|Warning\|Error" /tmp/san_qwgq_race.log | sed 's/(unsigned int.*)+/…+/' | sort | uniq -c | head -20 >> "$S"
echo "done at $(el) s" >> "$S"
