#!/bin/bash
# call_s29c.sh — session 29, call 3: call 2's prefill change with the 4-bit conversion's stores coalesced again (four
# words of the grid-stride walk loaded at once, not four consecutive words a thread). Tests (the prefill matmul
# subset), logits md5 against kiln-base (a5fcfce) at prefill chunks 100 and 2048, ncu of two 2048-token prefills
# of a 2-layer llama-3-8b q4 (the second with the bounds kept), prefill tok/s A/B, the c=64 A/B; and for
# the bf16 batch-1 target, ncu of a 2-layer llama-3-8b bf16 decode step in order (clocks and caches as they are).
#   run: bash bench/cuda/call_s29c.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth q8 l8q8
( /tmp/k/kiln synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l2q4 > /dev/null 2>&1; touch /tmp/s/l2q4.done
  /tmp/k/kiln synth --preset llama-3-8b --dtype bf16 --layers 2 --out /tmp/s/l2bf16 > /dev/null 2>&1; touch /tmp/s/l2bf16.done ) &
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8q8.done ] || [ ! -f /tmp/s/l2bf16.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
IDS=$(seq -s, 10 2057)
call_md5_ab "l8q4 l8q8" "100 2048"
echo "md5 done at $(el) s" >> "$S"
for b in kiln-base kiln; do
  timeout 120 ncu --print-units base --metrics gpu__time_duration.sum --csv /tmp/k/$b bench /tmp/s/l2q4 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 2 > /tmp/ncu_$b.csv 2>/dev/null
  python3 bench/cuda/ncu_seg.py /tmp/ncu_$b.csv "prefill $b" sum >> $OUT/ncu.txt
done
KILN_CUDA_GRAPH=0 timeout 120 ncu --print-units base --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
  /tmp/k/kiln bench /tmp/s/l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 3 --runs 1 > /tmp/ncu_bf.csv 2>/dev/null
python3 bench/cuda/ncu_seg.py /tmp/ncu_bf.csv "bf16 decode" last >> $OUT/ncu.txt
echo "ncu done at $(el) s" >> "$S"
call_base_new_ab
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/ncu.txt $OUT/bench.txt
