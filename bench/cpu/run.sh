#!/usr/bin/env bash
# CPU decode benchmark of bench/CPU.md: a Qwen3-0.6B-shaped model on random
# weights, decode speed vs the memory bandwidth measured in the same run.
#   bench/cpu/run.sh [build-dir] [extra neuron bench flags...]
# Prints the load average first: other work on the machine lowers both the
# bandwidth probe and the decode speed, so record it with the numbers.
set -euo pipefail
build=${1:-build}
shift || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); cpus: $(nproc)"
for isa in avx512 avx512_bf16; do
  echo "== NEURON_CPU_ISA=$isa"
  NEURON_CPU_ISA=$isa "$build/neuron" bench --config qwen3-0.6b --dummy-weights --device cpu \
    --prompt-len 128 --gen 32 "$@"
done
