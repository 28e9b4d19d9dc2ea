#!/usr/bin/env bash
# One device call for the architecture seam (DESIGN.md section 3): the GPU
# tests of the new tree, then the batch-1, prefill and 64-sequence decode
# numbers of the tree before the seam (neuron-base) and after it (neuron),
# alternating on the same GPU, and the new families' shapes on the new tree.
#   cp <build of the commit before the seam>/neuron build/neuron-base
#   ../shared/tools/device-bundle .bundle build/neuron build/neuron-base build/cuda_tests
#   bash bench/cuda/run-seam.sh          (results under $OUT)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.seam-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)" >>"$OUT/gpu.txt"
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 )) s: $*" >>"$OUT/gpu.txt"; }
NCCL_NVLS_ENABLE=0 timeout 200 .bundle/run cuda_tests >"$OUT/cuda_tests.log" 2>&1
log "cuda_tests rc=$?"
bench() {  # bench LABEL BINARY ARGS...
  local label=$1 bundle=$2; shift 2  # bundle: the binary's name in .bundle
  echo "== $label $*"
  timeout 150 .bundle/run "$bundle" bench --dummy-weights --device cuda:0 --json "$@"
}
{
  for round in 1 2; do
    for side in base new; do
      b=neuron; [ $side = base ] && b=neuron-base
      bench "$side-r$round" $b --config qwen3-8b --prompt-len 128,2048 --gen 128
      bench "$side-r$round" $b --config qwen3-8b --prompt-len 128 --gen 64 --batch 64
    done
  done
} >"$OUT/before-after.log" 2>&1
log "before/after done"
{
  bench llama-3.1-8b neuron --config llama-3.1-8b --prompt-len 128,2048 --gen 128
  bench llama-3.1-8b neuron --config llama-3.1-8b --prompt-len 128 --gen 64 --batch 64
  bench qwen3-30b-a3b neuron --config qwen3-30b-a3b --prompt-len 128,2048 --gen 64
} >"$OUT/families.log" 2>&1
log "families done"
