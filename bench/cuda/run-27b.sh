#!/usr/bin/env bash
# One device call for issue 27 on the Qwen3.5-27B shape: (1) the chunked delta rule's GPU tests and the hybrid
# fixtures through the runner, and the MoE kernels' (`CudaMoe*`); (2) dummy-weight prefill of the 27B shape at
# 2048 / 8192 and Qwen3-30B-A3B decode at batch 1 and 4 with `neuron-base` (the binary before a change) and
# `neuron`, alternating; (3) neuron and llama.cpp (built here in the background from
# .convert/llama-src.tar.xz) on one random bf16 GGUF of the shape (hybrid_gguf.py, /dev/shm): `neuron generate`
# at 128 and 8192 prompt tokens, `llama-bench -p 8192 -n 64`, `llama-batched-bench` at 1 and 64, and both servers
# under `neuron bench-serve` at 1 and 64 streams (prompt 128, gen 64, one request a client). A watchdog ends it
# at LIMIT s (570); what finished by then comes back as $OUT/r.tgz. AB_PREFILL_ROUNDS=0 skips (2)'s prefill,
# AB_MOE_ROUNDS=0 its 30B-A3B decode; WITH_35B=1 adds the 35B-A3B shape (the_35b); PROFILE=1 adds each kernel's device time in an 8192-token prefill of the
# 27B shape (profile_prefill in call_lib.sh: Nsight Systems, or Nsight Compute where nsys is missing).
#   bash bench/cuda/bundle_ab.sh .bundle BASE_NEURON build/neuron build/cuda_tests
#   run: bash bench/cuda/run-27b.sh   (carry .bundle, .convert/llama-src.tar.xz, .convert/gguf-py, .dev/qtok.tar.xz)
set -uo pipefail
source bench/cuda/call_lib.sh
main() {
build_llama_cuda llama-bench llama-batched-bench llama-server
timeout 150 .bundle/run cuda_tests --gtest_filter='CudaGatedDelta*:CudaHybrid*:Fixtures/CudaHybrid*:CudaMoe*:CudaFamily*' >$R/tests.log 2>&1
say "cuda_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|actual" $R/tests.log | head -40 >>$R/steps.log
B="bench --dummy-weights --device cuda:0 --json --config qwen3.5-27b --prompt-len 2048,8192 --gen 16"
for round in $(seq ${AB_PREFILL_ROUNDS:-2}); do
  for b in neuron-base neuron; do
    timeout 100 .bundle/run $b $B >>$R/bench-$b.jsonl 2>>$R/bench.err; say "prefill round $round $b rc=$?"
  done
done
M="bench --dummy-weights --device cuda:0 --json --config qwen3-30b-a3b --prompt-len 128 --gen 128"
for round in $(seq ${AB_MOE_ROUNDS:-2}); do
  for b in neuron-base neuron; do
    for batch in 1 4; do
      timeout 60 .bundle/run $b $M --batch $batch >>$R/moe-$b.jsonl 2>>$R/bench.err; say "30b-a3b round $round $b batch $batch rc=$?"
    done
  done
done
[ "${PROFILE:-0}" = 1 ] && profile_prefill q27-8192 qwen3.5-27b 8192
tar xJf .dev/qtok.tar.xz -C /tmp
G=$WORK/q35-27b-bf16.gguf
PYTHONPATH=$root/.convert/gguf-py python3 bench/cuda/hybrid_gguf.py $G --tokenizer /tmp/qtok --shape qwen3.5-27b --type bf16 >$R/gguf.log 2>&1
say "gguf rc=$? $(du -b $G | cut -f1)"
for p in 128 8192; do neuron_gen prompt-$p $G $p 64; done
serve_neuron neuron-27b $G
wait_llama_build
timeout 100 $L/llama-bench -m $G -ngl 99 -p 8192 -n 64 -r 1 -o jsonl >$R/llama-bench.jsonl 2>$R/llama-bench.err
say "llama-bench rc=$? $(cut -c1-400 $R/llama-bench.jsonl | tr '\n' ' ')"
serve_llama llama-27b $G
timeout 100 $L/llama-batched-bench -m $G -ngl 99 -c 16384 -npp 128 -ntg 32 -npl 1,64 >$R/llama-batched.txt 2>&1
say "llama-batched-bench rc=$?"; grep -E "^\|" $R/llama-batched.txt | tail -4 >>$R/steps.log
[ "${WITH_35B:-0}" = 1 ] && { rm -f $G; the_35b; }
say "all done"
}
run_watched main
