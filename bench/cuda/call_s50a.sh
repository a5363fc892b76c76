#!/bin/bash
# call_s50a.sh — written in session 49 for the next session, NOT run: is session 49's racecheck report on the 4-bit
# wgmma matmul (stage reads vs the producer's cp.async fills) the tool or the kernel? The quick QWG subset
# (KILN_CUDA_TEST_QWG_ONLY=quick: two qwg_case calls, 4-bit and 8-bit) plain, then under racecheck with the default
# fill (cp.async.mbarrier.arrive.noinc) and with KILN_CUDA_QWG_FILLWAIT=1 (cp.async.wait_group + a plain arrive, the
# prefill attention's form, which racecheck read as ordered). Hazards with both: look at the kernel; only with the
# default: the tool does not model the .noinc arrival. Package: PACK_BINS="test_cuda_kernels", built with
# PATCH=bench/cuda/qwg_allarrive_s50.patch (main no longer has KILN_CUDA_QWG_FILLWAIT since session 50's answer).
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
# first the whole QWG subset: test_qwg_defer's y != d case (session 49's narrowing of the deferral, compiled, not run)
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "^# qwg defer" /tmp/t_qwg.log >> "$S"
call_t1 qwgq KILN_CUDA_TEST_QWG_ONLY=quick
call_t1 qwgq_fw KILN_CUDA_TEST_QWG_ONLY=quick KILN_CUDA_QWG_FILLWAIT=1
call_san racecheck 120 qwgq_race KILN_CUDA_TEST_QWG_ONLY=quick -- /tmp/k/test_cuda_kernels
call_san racecheck 120 qwgq_fw_race KILN_CUDA_TEST_QWG_ONLY=quick KILN_CUDA_QWG_FILLWAIT=1 -- /tmp/k/test_cuda_kernels
echo "done at $(el) s" >> "$S"
