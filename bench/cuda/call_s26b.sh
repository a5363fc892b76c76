#!/bin/bash
# call_s26b.sh — session 26, call 2: the 4-bit wgmma conversion with one PRMT (0x64 under each code byte) + one AND
# instead of PRMT + AND + OR, and at group ≥ 64 the f16 slab's factors loaded once a chunk (matmul_wgmma.cu; the same
# f16 values: bitwise). test_qwg / the multi launch (bitwise v2), logits md5 of prefill chunks of 16 / 64 tokens
# (the wgmma path) old vs new, the QWG bench old vs new, llama-3-8b / qwen3-0.6b q4 through the engine at c = 1, 8, 64
# alternating old and new, and the new kernel's SASS (spill location). Calls 3 and 4 ran it again on later builds
# with these variables set (call_s26c.sh, call_s26d.sh): CALL_Q8=1 also llama-3-8b q8, CALL_TBINS whole test binaries
# run after test_qwg, CALL_QBINS the QWG bench's binaries, CALL_Q06 the qwen3-0.6b engine runs' binaries.
#   run: bash bench/cuda/call_s26b.sh PKG   (PACK_BINS="kiln kiln-old test_cuda_kernels test_cuda_kernels-old")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
[ -n "$CALL_Q8" ] && call_synth q8 l8q8
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
[ -n "$CALL_TBINS" ] && call_tbin $CALL_TBINS
call_qwgbench ${CALL_QBINS:-test_cuda_kernels-old test_cuda_kernels test_cuda_kernels-old test_cuda_kernels}
echo "tests + qwg bench done at $(el) s" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/q06q4.done ] || { [ -n "$CALL_Q8" ] && [ ! -f /tmp/s/l8q8.done ]; }; do sleep 1; done
call_logits_chunks "/tmp/s/l8q4 /tmp/s/q06q4 tests/fixtures/models/llama-tiny-mlx-q4 tests/fixtures/models/qwen3-tiny-mlx-mixed" "16 64" kiln-old kiln
echo "logits done at $(el) s" >> "$S"
call_conc l8q4 kiln-old kiln kiln-old kiln
call_conc q06q4 ${CALL_Q06:-kiln-old kiln}
[ -n "$CALL_Q8" ] && call_conc l8q8 kiln-old kiln
echo "conc done at $(el) s" >> "$S"
call_sass '_Z10wgm_kernelILi4ELi64ELi1ELi0EEvPfPKhPKfi7dweightiiiii' '_Z16wgm_multi_kernelILi4ELi64ELi1EEvPKhPKfi8wg_slots'
echo "all done at $(el) s" >> "$S"
cat $S
