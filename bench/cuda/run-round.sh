#!/usr/bin/env bash
# One device call after a round of kernel changes: (1) the GPU tests of the hybrids, the MoE kernels, the
# quantized and tiny runners (`CudaGatedDelta*`, `CudaHybrid*`, `CudaMoe*`, `CudaFamily*`, `CudaQuant*`,
# `CudaRunnerTiny*`: expert parallelism on ranks sharing the GPU among them); (2) `neuron-base` (the binary
# before the change) and `neuron` alternating: dummy-weight prefill of the Qwen3.5-27B shape at 2048 / 8192
# tokens, Qwen3-30B-A3B decode at batch 1 and 4; then Qwen3-8B and Llama-3.1-8B (dummy weights) alternating;
# (3) the Qwen3.5-35B-A3B shape as a Q8_0 GGUF under neuron alone (the_35b, LLAMA_35B=0); (4) Qwen3-30B-A3B
# bf16 beside llama.cpp (the_30b without its Q4_K_M half). A watchdog ends it at LIMIT s (570); what finished
# comes back as $OUT/r.tgz. Knobs: PROFILE=1 adds profile_prefill of the 27B shape at 8192 tokens after the A/B;
# LLAMA_35B=1 runs llama.cpp on the 35B-A3B file too; WITH_35B=0 / WITH_30B=0 leave (3) / (4) out;
# QUANT_30B=1 adds the 30B's Q4_K_M half; TESTS: another gtest filter.
#   bash bench/cuda/bundle_ab.sh .bundle BASE_NEURON build/neuron build/cuda_tests
#   run: LIMIT=490 bash bench/cuda/run-round.sh   (carry .bundle, .convert/llama-src.tar.xz, .convert/gguf-py, .dev/qtok.tar.xz)
set -uo pipefail
source bench/cuda/call_lib.sh
main() {
build_llama_cuda llama-bench llama-server
timeout 240 .bundle/run cuda_tests --gtest_filter="${TESTS:-CudaGatedDelta*:CudaHybrid*:Fixtures/CudaHybrid*:CudaMoe*:CudaFamily*:CudaQuant*:CudaRunnerTiny*}" >$R/tests.log 2>&1
say "cuda_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|actual|worst" $R/tests.log | head -60 >>$R/steps.log
B="bench --dummy-weights --device cuda:0 --json --config qwen3.5-27b --prompt-len 2048,8192 --gen 16"
M="bench --dummy-weights --device cuda:0 --json --config qwen3-30b-a3b --prompt-len 128 --gen 128"
for round in $(seq ${AB_ROUNDS:-1}); do
  for b in neuron-base neuron; do
    timeout 100 .bundle/run $b $B >>$R/bench-$b.jsonl 2>>$R/bench.err; say "prefill round $round $b rc=$? $(tail -1 $R/bench-$b.jsonl | cut -c1-60)"
    for batch in 1 4; do
      timeout 60 .bundle/run $b $M --batch $batch >>$R/moe-$b.jsonl 2>>$R/bench.err; say "30b-a3b round $round $b batch $batch rc=$?"
    done
  done
done
bench_table
[ "${PROFILE:-0}" = 1 ] && profile_prefill q27-8192 qwen3.5-27b 8192
# Issue 26: Llama-3.1-8B within 5% of Qwen3-8B (dummy bf16 weights, same binary, alternating).
# neuron-base's Qwen3-8B too: head_dim 128's prefill before and after an attention change.
for round in 1 2; do
  for bc in neuron-base:qwen3-8b neuron:qwen3-8b neuron:llama-3.1-8b; do
    b=${bc%%:*} c=${bc#*:}
    timeout 40 .bundle/run $b bench --dummy-weights --device cuda:0 --json --config $c --prompt-len 128,2048 --gen 64 \
      >>$R/family-$b-$c.jsonl 2>>$R/bench.err
    say "family $b $c round $round rc=$? $(tail -1 $R/family-$b-$c.jsonl | grep -o '"decode_tok_s":[0-9.]*\|"prefill_ms":[0-9.]*' | tr '\n' ' ')"
  done
done
tar xJf .dev/qtok.tar.xz -C /tmp
[ "${WITH_35B:-1}" = 1 ] && LLAMA_35B=${LLAMA_35B:-0} the_35b
[ "${WITH_30B:-1}" = 1 ] && QUANT_30B=${QUANT_30B:-0} the_30b
say "all done"
}
run_watched main
