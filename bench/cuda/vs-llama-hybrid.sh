#!/usr/bin/env bash
# Qwen3.5-27B shape (bf16 random GGUF in /dev/shm, bench/cuda/hybrid_gguf.py) neuron vs llama.cpp
# (node-llama-cpp's source, .convert/llama-src.tar.xz, built here with CUDA), same file, same call:
# neuron generate at prompts 128 and 8192 (decode, prefill), neuron bench at 64 streams, llama-bench
# -p 8192 -n 64, llama-batched-bench at 1 and 64. One device call of ~9 minutes (16 cores).
#   bash bench/cuda/vs-llama-hybrid.sh   (carry .bundle; TOKENIZER=dir with Qwen's tokenizer.json, default
#   models/qwen3-tiny-a, or .dev/qtok.tar.xz when carried; results under $OUT/r)
set -uo pipefail
root=$PWD; R=$OUT/r; mkdir -p $R
main() {
t0=$(date +%s); log() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $R/run.log; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>$R/run.log
Q=${TOKENIZER:-$root/models/qwen3-tiny-a}
[ -f .dev/qtok.tar.xz ] && [ -z "${TOKENIZER:-}" ] && tar xJf .dev/qtok.tar.xz -C /tmp && Q=/tmp/qtok
( mkdir -p /tmp/llama && cd /tmp/llama && tar xJf $root/.convert/llama-src.tar.xz &&
  cmake -S llama.cpp -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DGGML_CUDA_NCCL=OFF -DCMAKE_BUILD_TYPE=Release >$R/llama-cfg.log 2>&1 &&
  nice -n 19 cmake --build b -j12 --target llama-bench llama-batched-bench >/tmp/llama-build.log 2>&1; echo "build rc=$?" >>/tmp/llama-build.log ) &
build=$!
G=/dev/shm/q35-27b-bf16.gguf
PYTHONPATH=$root/.convert/gguf-py python3 bench/cuda/hybrid_gguf.py $G --tokenizer $Q --shape qwen3.5-27b --type bf16 >$R/gguf.log 2>&1
log "gguf rc=$? $(du -b $G | cut -f1)"
ids() { python3 -c "import random; r=random.Random($2); print(','.join(str(r.randrange(1000,150000)) for _ in range($1)))"; }
for p in 128 8192; do
  timeout 200 .bundle/run neuron generate --model $G --device cuda:0 --prompt-ids $(ids $p 5) --max-tokens 65 --ignore-eos \
    --temperature 0 --repeat 2 --json 2>$R/gen-$p.err | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'prompt': $p, **d['timings']}))" >>$R/neuron-gen.jsonl
  log "neuron generate prompt $p: $(tail -1 $R/neuron-gen.jsonl)"
done
timeout 100 .bundle/run neuron bench --dummy-weights --device cuda:0 --json --config qwen3.5-27b --prompt-len 128 --gen 32 --batch 64 >>$R/neuron-bench.jsonl 2>>$R/neuron-bench.err
log "neuron bench b64 rc=$? $(tail -1 $R/neuron-bench.jsonl | cut -c1-300)"
wait $build; tail -3 /tmp/llama-build.log >>$R/run.log; log "llama build done"
L=/tmp/llama/b/bin
timeout 150 $L/llama-bench -m $G -ngl 99 -p 8192 -n 64 -r 1 -o jsonl >$R/llama-bench.jsonl 2>$R/llama-bench.err
log "llama-bench rc=$? $(cut -c1-300 $R/llama-bench.jsonl | tr '\n' ' ')"
timeout 120 $L/llama-batched-bench -m $G -ngl 99 -c 16384 -npp 128 -ntg 32 -npl 1,64 >$R/llama-batched.txt 2>&1
log "llama-batched-bench rc=$?"; grep -E "^\|" $R/llama-batched.txt | tail -4 >>$R/run.log
log "all done"
}
main &
m=$!
for i in $(seq 570); do kill -0 $m 2>/dev/null || break; sleep 1; done
cp /tmp/llama-build.log $R/ 2>/dev/null; rm -f /dev/shm/*.gguf
cat $R/run.log
