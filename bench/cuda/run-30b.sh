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
ids() { python3 -c "import random; r=random.Random($2); print(','.join(str(r.randrange(1000,150000)) for _ in range($1)))"; }
gen() {  # gen LABEL FILE
  timeout 120 .bundle/run neuron generate --model $2 --device cuda:0 --prompt-ids $(ids 2048 5) --max-tokens 129 --ignore-eos \
    --temperature 0 --repeat 2 --json 2>$R/gen-$1.err | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'file': '$1', **d['timings']}))" >>$R/neuron-gen.jsonl
  say "neuron generate $1: $(tail -1 $R/neuron-gen.jsonl)"
}
gen bf16 $G
S="--concurrency 1,64 --prompt-len 128 --gen 64 --requests-per-client 1 --warmup 1 --timeout 200"
start_neuron neuron-30b "$G:device=cuda:0" && bench neuron-30b $S
stop_server neuron-30b; say "neuron serve done"
wait $build; tail -3 /tmp/llama-build.log >>$R/steps.log; say "llama build done"
L=/tmp/llama/b/bin
timeout 100 $L/llama-bench -m $G -ngl 99 -p 2048 -n 128 -r 2 -o jsonl >$R/llama-bench.jsonl 2>$R/llama-bench.err
say "llama-bench bf16 rc=$? $(cut -c1-300 $R/llama-bench.jsonl | tr '\n' ' ')"
LLAMA_SERVER=$L/llama-server
start_llama llama-30b $G 64 16384 -ngl 99 && bench llama-30b $S
stop_server llama-30b; say "llama serve done"
timeout 150 $L/llama-quantize $G $Q Q4_K_M 16 >$R/quantize.log 2>&1; say "quantize rc=$? $(du -b $Q | cut -f1)"
rm -f $G
gen q4_k_m $Q
timeout 100 $L/llama-bench -m $Q -ngl 99 -p 2048 -n 128 -r 2 -o jsonl >>$R/llama-bench.jsonl 2>>$R/llama-bench.err
say "llama-bench q4_k_m rc=$? $(tail -1 $R/llama-bench.jsonl | cut -c1-300)"
say "all done"
}
run_watched main
