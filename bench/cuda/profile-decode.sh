#!/usr/bin/env bash
# ncu (Nsight Compute, on the device image): per-kernel device time of decode steps (graph nodes), Qwen3-30B-A3B bf16 and Qwen3.5-27B bf16 (dummy weights).
#   bash bench/cuda/profile-decode.sh   (carry .bundle; $OUT/r/prof.log: kernels by total time, one table a model)
# The MoE skip (25000 launches) passes the dummy weights' fill kernels (one an expert tensor) and lands in
# the decode steps' graph nodes.
set -uo pipefail
R=$OUT/r; mkdir -p $R
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" >>$R/prof.log
prof() {  # $1 label, $2 config, $3 skip, $4 count
  timeout 200 $NCU --clock-control none --graph-profiling node --launch-skip $3 --launch-count $4 \
    --metrics gpu__time_duration.sum --csv --page raw \
    .bundle/run neuron bench --dummy-weights --device cuda:0 --config $2 --prompt-len 16 --gen 24 >$R/ncu-$1.csv 2>$R/ncu-$1.err
  echo "$1 rc=$?" >>$R/prof.log
  python3 bench/cuda/ncu_table.py $R/ncu-$1.csv --unit us --width 60 --top 25 >>$R/prof.log
}
prof moe qwen3-30b-a3b 25000 1200
[ $SECONDS -lt 120 ] && prof q27 qwen3.5-27b 4000 1200
cat $R/prof.log
