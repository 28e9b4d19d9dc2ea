#!/usr/bin/env bash
# One device call: /v1/embeddings throughput of the Qwen3-Embedding-0.6B shape
# (Qwen3-0.6B, random weights from `neuron gen-model`), ~512-token inputs, 64
# requests at a time: neuron (--task embed --pooling last, CUDA) and
# llama-server --embeddings --pooling last on the bf16 GGUF llama.cpp's
# converter writes from the same checkpoint, on the same GPU.
# Needs (carried, git-ignored) .convert/: convert_hf_to_gguf.py, conversion/,
# gguf-py/, llama-src.tar.xz (node-llama-cpp 3.22.1's llama.cpp), qtok/ (the
# Qwen tokenizer); .bundle with build/neuron.
set -uo pipefail
root=$(pwd); OUT=${OUT:-/tmp/embed-out}; mkdir -p "$OUT"
log() { echo "$(date +%T) $*" | tee -a "$OUT/run.log"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >>"$OUT/run.log"
( mkdir -p /tmp/llama && cd /tmp/llama && tar xJf "$root/.convert/llama-src.tar.xz" &&
  cmake -S . -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DGGML_BACKEND_DL=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release >"$OUT/llama-cfg.log" 2>&1 &&
  cmake --build b -j16 --target llama-server >/tmp/llama-build.log 2>&1; echo "build rc=$?" >>/tmp/llama-build.log ) &
build=$!
.bundle/run neuron gen-model --preset qwen3-0.6b --out /tmp/emb --seed 3 >/dev/null && cp .convert/qtok/* /tmp/emb/
log "checkpoint: $(du -sh /tmp/emb | cut -f1)"
PYTHONPATH=$root/.convert/gguf-py:$root/.convert python3 .convert/convert_hf_to_gguf.py /tmp/emb --outtype bf16 \
  --outfile /tmp/emb.gguf >/tmp/convert.log 2>&1; log "convert rc=$? $(du -sh /tmp/emb.gguf | cut -f1)"
if [[ -z ${SKIP_NEURON:-} ]]; then
  .bundle/run neuron serve --model '/tmp/emb:device=cuda' --task embed --pooling last --port 18080 >"$OUT/neuron.log" 2>&1 &
  srv=$!
  for i in $(seq 180); do curl -s localhost:18080/v1/models | grep -q "\"id\"" && break; sleep 1; done
  log "neuron up"
  for r in 1 2; do python3 bench/embed/client.py http://127.0.0.1:18080 emb 512 64 $r | tee -a "$OUT/results.jsonl"; done
  kill $srv; wait $srv 2>/dev/null
fi
wait $build; tail -2 /tmp/llama-build.log >>"$OUT/run.log"
/tmp/llama/b/bin/llama-server --list-devices >>"$OUT/run.log" 2>&1
/tmp/llama/b/bin/llama-server -m /tmp/emb.gguf --embeddings --pooling last -ngl 99 --device CUDA0 -c 65536 -np 64 -b 2048 -ub 2048 \
  --port 18081 >"$OUT/llama.log" 2>&1 &
ls=$!
for i in $(seq 120); do curl -sf localhost:18081/health >/dev/null && break; sleep 1; done
log "llama-server up"
for r in 1 2; do python3 bench/embed/client.py http://127.0.0.1:18081 emb 512 64 $r | tee -a "$OUT/results.jsonl"; done
kill $ls
cp /tmp/convert.log /tmp/llama-build.log "$OUT/" 2>/dev/null
log done
