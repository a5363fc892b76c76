#!/bin/bash
# ncu_tsv.sh — the rows of an `ncu --csv --metrics ...` log as tab-separated kernel name, block, grid, metric,
# value (ncu's other lines dropped), for the device-call scripts here.
#   bash bench/cuda/ncu_tsv.sh FILE.csv
grep -E '^"' "${1:?ncu csv file}" | awk -F'","' '{print $5 "\t" $8 "\t" $9 "\t" $(NF-2) "\t" $NF}'
