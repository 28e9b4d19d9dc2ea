#!/usr/bin/env bash
# One device call: the GPU tests, the batched-decode and batch-1 benchmarks,
# and the serving benchmark of neuron alone (8B, then 0.6B), with a bundle at
# .bundle (device-bundle .bundle build/neuron build/cuda_tests build/cuda_bench).
#   bash bench/cuda/run-batching.sh     (results under $OUT)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)" >>"$OUT/gpu.txt"
t0=$(date +%s)
NCCL_NVLS_ENABLE=0 timeout 180 .bundle/run cuda_tests >"$OUT/cuda_tests.log" 2>&1
echo "cuda_tests rc=$? in $(( $(date +%s) - t0 )) s" >>"$OUT/gpu.txt"
{
  for c in qwen3-0.6b qwen3-8b; do timeout 120 .bundle/run cuda_bench --config $c --batch 1,8,32,64; done
  for p in 128 2048; do
    timeout 120 .bundle/run neuron bench --config qwen3-8b --dummy-weights --device cuda:0 --prompt-len $p --gen 128 --json
  done
  timeout 120 .bundle/run neuron bench --config qwen3-0.6b --dummy-weights --device cuda:0 --prompt-len 128 --gen 128 --json
} >"$OUT/bench.log" 2>&1
echo "benches done at $(( $(date +%s) - t0 )) s" >>"$OUT/gpu.txt"
OUT=$OUT/serve DURATION=${DURATION:-10} bash bench/serve/run-h200.sh neuron-8b neuron-0.6b
echo "serve done at $(( $(date +%s) - t0 )) s" >>"$OUT/gpu.txt"
