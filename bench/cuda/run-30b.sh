#!/usr/bin/env bash
# One device call for issue 26 on Qwen3-30B-A3B: neuron and llama.cpp (built here in the background from
# .convert/llama-src.tar.xz) on one random bf16 GGUF of the real shape (moe_gguf.py, 61 GB in /dev/shm: the
# page cache), then on llama-quantize's Q4_K_M of it. `neuron generate` (2048 prompt tokens, 128 decoded,
# twice: TTFT, decode, and load_ms from the page cache), `neuron serve` and `llama-server -np 64` under
# `neuron bench-serve` at 1 and 64 streams (prompt 128, gen 64, one request a client), `llama-bench -p 2048
# -n 128`. A watchdog ends it at 570 s; what finished by then comes back as $OUT/r.tgz.
#   run: bash bench/cuda/run-30b.sh   (carry .bundle, .convert/llama-src.tar.xz, .convert/gguf-py, .dev/qtok.tar.xz)
set -uo pipefail
source bench/cuda/call_lib.sh
main() {
build_llama_cuda llama-bench llama-server llama-quantize
tar xJf .dev/qtok.tar.xz -C /tmp
G=$WORK/q30b-bf16.gguf Q=$WORK/q30b-q4_k_m.gguf
PYTHONPATH=$root/.convert/gguf-py python3 bench/cuda/moe_gguf.py $G --tokenizer /tmp/qtok --shape qwen3-30b-a3b --type bf16 >$R/gguf.log 2>&1
say "gguf rc=$? $(du -b $G | cut -f1)"
neuron_gen bf16 $G 2048 128
serve_neuron neuron-30b $G
wait_llama_build
timeout 100 $L/llama-bench -m $G -ngl 99 -p 2048 -n 128 -r 2 -o jsonl >$R/llama-bench.jsonl 2>$R/llama-bench.err
say "llama-bench bf16 rc=$? $(cut -c1-300 $R/llama-bench.jsonl | tr '\n' ' ')"
serve_llama llama-30b $G
timeout 150 $L/llama-quantize $G $Q Q4_K_M 16 >$R/quantize.log 2>&1; say "quantize rc=$? $(du -b $Q | cut -f1)"
rm -f $G
neuron_gen q4_k_m $Q 2048 128
timeout 100 $L/llama-bench -m $Q -ngl 99 -p 2048 -n 128 -r 2 -o jsonl >>$R/llama-bench.jsonl 2>>$R/llama-bench.err
say "llama-bench q4_k_m rc=$? $(tail -1 $R/llama-bench.jsonl | cut -c1-300)"
say "all done"
}
run_watched main
