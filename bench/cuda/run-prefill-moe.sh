#!/usr/bin/env bash
# One device call after the prefill kernels (delta_chunk_prep and the attention prefill on tensor cores,
# swiglu in 16-byte accesses) and the quantized experts' grouped tensor-core kernel: (1) their GPU tests, and
# (SANITIZE=1, the default) the new kernels' tests under compute-sanitizer's memcheck and racecheck;
# (2) `neuron-base` (the binary before) and `neuron` alternating on dummy weights: the Qwen3.5-27B shape's
# prefill at 2048 / 8192 tokens, Qwen3-8B's at 2048 (head_dim 128), the Qwen3.5-35B-A3B shape quantized to
# Q8_0 at load and Qwen3-30B-A3B at Q4_K (decode at batch 1 and 64); (3) PROFILE=1: each kernel's time in a
# 27B prefill at 8192. Round 2 (the first three again) after the profile. A watchdog ends it at LIMIT s (570); what finished comes back as $OUT/r.tgz.
#   bash bench/cuda/bundle_ab.sh .bundle BASE_NEURON build/neuron build/cuda_tests
#   run: bash bench/cuda/run-prefill-moe.sh   (carry .bundle)
set -uo pipefail
source bench/cuda/call_lib.sh
bench_ab() {  # bench_ab LABEL TIMEOUT ARGS...: both binaries, one line of JSON each into bench-LABEL-BINARY.jsonl
  local label=$1 limit=$2; shift 2
  for b in neuron-base neuron; do
    timeout $limit .bundle/run $b bench --dummy-weights --device cuda:0 --json "$@" >>$R/bench-$label-$b.jsonl 2>>$R/bench.err
    say "$label $b rc=$? $(tail -1 $R/bench-$label-$b.jsonl | grep -o '"prefill_ms":[0-9.]*\|"decode_tok_s":[0-9.]*\|"load_ms":[0-9.]*' | tr '\n' ' ')"
  done
}
main() {
timeout 240 .bundle/run cuda_tests --gtest_filter="${TESTS:-CudaGatedDelta*:CudaHybrid*:Fixtures/CudaHybrid*:CudaPagedAttention*:CudaKernels*:CudaFamily*:CudaMoe*:CudaQuant*:CudaRunnerTiny*}" >$R/tests.log 2>&1
say "cuda_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|actual|worst" $R/tests.log | head -60 >>$R/steps.log
# compute-sanitizer's memcheck (global memory) and racecheck (shared memory hazards, cp.async's among them)
# over the new kernels' tests, SAN_LIMIT s each (Firecracker machines: gVisor's refuse the device).
sanitize() {
  local cs tool
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$cs" ] || { say "sanitize: no compute-sanitizer"; return; }
  for tool in memcheck racecheck; do
    timeout ${SAN_LIMIT:-60} "$cs" --tool $tool --error-exitcode 3 --print-limit 20 .bundle/run cuda_tests \
      --gtest_filter="${SAN_TESTS:-CudaGatedDelta.Chunked*:CudaPagedAttention.MixedPrefillAndDecodeMatchReference:CudaMoe.QuantizedExpertRowsMatchTheirDequantizedWeights:CudaKernels.SwigluMatchesReference}" \
      >$R/sanitize-$tool.log 2>&1
    say "sanitize $tool rc=$? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $R/sanitize-$tool.log | tr '\n' ' ')"
  done
}
[ "${SANITIZE:-1}" = 1 ] && sanitize
round() {
  bench_ab q27 100 --config qwen3.5-27b --prompt-len 2048,8192 --gen 16
  bench_ab q8b 40 --config qwen3-8b --prompt-len 2048 --gen 16
  bench_ab 35b-q8-b64 120 --config qwen3.5-35b-a3b --quant q8_0 --batch 64 --prompt-len 128 --gen 32
  [ $1 = 1 ] || return
  bench_ab 35b-q8-b1 120 --config qwen3.5-35b-a3b --quant q8_0 --batch 1 --prompt-len 128 --gen 64
  bench_ab 30b-q4k-b64 120 --config qwen3-30b-a3b --quant q4_k --batch 64 --prompt-len 128 --gen 32
}
round 1; bench_table
[ "${PROFILE:-1}" = 1 ] && profile_prefill q27-8192 qwen3.5-27b 8192
round 2; bench_table
say "all done"
}
run_watched main
