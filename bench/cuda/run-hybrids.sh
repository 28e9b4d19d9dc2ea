#!/usr/bin/env bash
# One device call for the hybrids on CUDA (not yet run: no device was lent in the session that wrote it):
# the GPU tests of the Gated DeltaNet path, then neuron bench on dummy weights of the real shapes
# (Qwen3.5-27B bf16 at 128 / 2048 / 8192 and 64 streams, Qwen3.5-35B-A3B at FP8). Bundle first:
#   ../shared/tools/device-bundle .bundle build/neuron build/cuda_tests   (cuda_tests: bench/cuda/build_tests.sh)
#   run: bash bench/cuda/run-hybrids.sh   (carry .bundle; results under $OUT/r; SKIP_REST=1: only the hybrids' tests)
set -uo pipefail
root=$PWD; R=$OUT/r; mkdir -p $R
t0=$(date +%s); log() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $R/run.log; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>$R/run.log
mkdir -p /work && ln -sfn $root /work/main
NCCL_NVLS_ENABLE=0 timeout 150 .bundle/run cuda_tests --gtest_filter='CudaGatedDelta*:CudaHybrid*:CudaStepInputs*:CudaKernels*' >$R/cuda_tests_new.log 2>&1
log "cuda_tests (new) rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/cuda_tests_new.log | tr '\n' ' ')"
grep -E "FAILED|gated delta|fp8\]|Failure|error|Expected|Which is|actual" $R/cuda_tests_new.log | head -60 >>$R/run.log
B="neuron bench --dummy-weights --device cuda:0 --json"  # timeout cannot run a shell function
timeout 130 .bundle/run $B --config qwen3.5-27b --prompt-len 128,2048,8192 --gen 64 >>$R/bench.jsonl 2>>$R/bench.err; log "27b b1 rc=$?"
timeout 80 .bundle/run $B --config qwen3.5-27b --prompt-len 128 --gen 32 --batch 64 >>$R/bench.jsonl 2>>$R/bench.err; log "27b b64 rc=$?"
timeout 80 .bundle/run $B --config qwen3.5-35b-a3b --quant fp8 --prompt-len 128,2048 --gen 64 >>$R/bench.jsonl 2>>$R/bench.err; log "35b fp8 b1 rc=$?"
[ "${SKIP_REST:-0}" = 1 ] || NCCL_NVLS_ENABLE=0 timeout 100 .bundle/run cuda_tests --gtest_filter='-CudaRunnerTiny*:CudaEmbed*:CudaGatedDelta*:CudaHybrid*:CudaStepInputs*:CudaKernels*' >$R/cuda_tests_rest.log 2>&1
log "cuda_tests (rest) rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/cuda_tests_rest.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $R/cuda_tests_rest.log >>$R/run.log
tail -c 1500 $R/bench.err >>$R/run.log
log done
