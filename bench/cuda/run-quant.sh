#!/usr/bin/env bash
# Issue 14 on one H200, part 1: the GPU tests (quantized kernels first), the
# projections' GEMV per weight format (cuda_bench --quant-gemv), and
# `neuron bench` decode/prefill of the Qwen3-8B shape on random weights
# quantized at load (bf16, q8_0, q4_k, fp8). Run from the repo root with a
# bundle of build/neuron, build/cuda_tests and build/cuda_bench at .bundle:
#   bash bench/cuda/run-quant.sh            (results in $OUT, default .serve-out/quant)
# Knobs: QUANTS="none q8_0 q4_k fp8" CONFIGS="qwen3-8b" TESTS=1 GEMV=1
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/quant}
QUANTS=${QUANTS:-none q8_0 q4_k fp8}
CONFIGS=${CONFIGS:-qwen3-8b}
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/run.log" >&2; }
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
} >>"$OUT/run.log" 2>&1
if [ "${TESTS:-1}" = 1 ]; then
  log "cuda_tests (quantized first)"
  .bundle/run cuda_tests --gtest_filter='CudaQuant*' >"$OUT/tests-quant.log" 2>&1
  log "quant tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests-quant.log" | tr '\n' ' ')"
  .bundle/run cuda_tests --gtest_filter='-CudaQuant*' >"$OUT/tests-rest.log" 2>&1
  log "other tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests-rest.log" | tr '\n' ' ')"
fi
for config in $CONFIGS; do
  if [ "${GEMV:-1}" = 1 ]; then
    log "cuda_bench --quant-gemv $config"
    .bundle/run cuda_bench --config "$config" --quant-gemv >>"$OUT/quant-gemv.jsonl" 2>>"$OUT/run.log"
  fi
  for q in $QUANTS; do
    log "neuron bench $config --quant $q"
    .bundle/run neuron bench --config "$config" --dummy-weights --device cuda:0 --prompt-len 128,2048 --gen 128 \
      --quant "$q" --json >>"$OUT/bench.jsonl" 2>>"$OUT/run.log" || log "bench $config $q failed"
  done
done
log "done"
