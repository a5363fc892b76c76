#!/bin/bash
# call_s28d.sh — session 28, call 4: (1) is the c=1 / batch-1 rate of this tree's binary below c291234's (call 3 saw
# 386-389 vs 396-397 tok/s at c=1 though T = 1 never reaches matmul_wgmma.cu)? kiln-base vs kiln alternating;
# (2) ncu source counters of the batch-1 GEMVs: gemv_tc_kernel (q4, gate/up of a 2-layer llama-3-8b synth at 2048
# positions) and gemvp_glu_kernel (bf16, the same), one decode-step launch each, graphs off.
#   run: bash bench/cuda/call_s28d.sh PKG   (PACK_BINS="kiln kiln-base")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
( /tmp/k/kiln synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l2q4 > /dev/null 2>&1
  /tmp/k/kiln synth --preset llama-3-8b --dtype bf16 --layers 2 --out /tmp/s/l2bf16 > /dev/null 2>&1; touch /tmp/s/l2.done ) &
while [ ! -f /tmp/s/l2.done ]; do sleep 1; done
ncu1() { # name regex skip ckpt
  KILN_CUDA_GRAPH=0 timeout 150 ncu --set full --import-source no -k "regex:$2" --launch-skip $3 --launch-count 1 -o /tmp/r_$1 \
    /tmp/k/kiln bench /tmp/s/$4 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 > /tmp/ncu_$1.log 2>&1
  echo "ncu $1 rc=$? at $(el) s" >> "$S"
  ncu -i /tmp/r_$1.ncu-rep --page details --print-details all | grep -E "^  [a-z_]|Duration|Block Size|Grid Size|Registers Per|Issue Slots Busy|No Eligible|DRAM Throughput|Memory Throughput" >> "$S"
  ncu -i /tmp/r_$1.ncu-rep --page source --csv --print-source sass > /tmp/src_$1.csv 2>&1
  xz -9 -c /tmp/src_$1.csv > $OUT/src_$1.csv.xz
}
ncu1 tc gemv_tc_kernel 11 l2q4
ncu1 glu gemvp_glu_kernel 2 l2bf16
while [ ! -f /tmp/s/l8q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
for i in 1 2 3; do
  call_b1 l8q4 kiln-base X=1
  call_b1 l8q4 kiln X=1
done
for i in 1 2; do
  for b in kiln-base kiln; do
    echo "== c1 $b" >> $OUT/bench.txt
    timeout 100 /tmp/k/$b bench /tmp/s/l8q4 --backend cuda --concurrency 1 --prompt-tokens 128 --gen-tokens 128 --max-batch 128 --kv-cache-gb 16 --json 2>/dev/null |
      tail -1 | grep -o '"decode_tok_s": [0-9.]*\|"itl_mean_ms": [0-9.]*' | paste - - >> $OUT/bench.txt
  done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
