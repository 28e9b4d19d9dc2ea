#!/usr/bin/env bash
# One device call for the chunked delta rule on CUDA (kernels on main, their use by the runner on the branch
# wip/cuda-chunked-delta until this has passed): its kernel tests and the hybrid fixtures through the runner,
# then Qwen3.5-27B-shaped prefill (dummy weights, bf16) with the recurrent kernel (main) and the chunked one
# (the branch), alternating. Bundles, built here:
#   git checkout wip/cuda-chunked-delta && ninja -C build neuron && bash bench/cuda/build_tests.sh build &&
#     ../shared/tools/device-bundle .bundle build/neuron build/cuda_tests
#   git checkout main && ninja -C build neuron && ../shared/tools/device-bundle .bundle-base build/neuron
#   run: bash bench/cuda/run-chunked-delta.sh   (carry .bundle and .bundle-base; results in $OUT/r)
set -uo pipefail
root=$PWD; R=$OUT/r; mkdir -p $R
t0=$(date +%s); log() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $R/run.log; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>$R/run.log
mkdir -p /work && ln -sfn $root /work/main
timeout 150 .bundle/run cuda_tests --gtest_filter='CudaGatedDelta*:CudaHybrid*:Fixtures/CudaHybrid*' >$R/tests.log 2>&1
log "cuda_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | tr '\n' ' ')"
grep -E "FAILED|gated delta|Failure|Expected|Which is|actual" $R/tests.log | head -60 >>$R/run.log
B="neuron bench --dummy-weights --device cuda:0 --json --config qwen3.5-27b --prompt-len 2048,8192 --gen 16"
for round in 1 2; do
  for b in .bundle-base .bundle; do
    timeout 120 $b/run $B >>$R/bench-$b.jsonl 2>>$R/bench.err; log "round $round $b rc=$?"
  done
done
tail -c 1500 $R/bench.err >>$R/run.log
log done
