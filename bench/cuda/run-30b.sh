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
the_30b
say "all done"
}
run_watched main
