#!/usr/bin/env bash
# /v1/embeddings throughput on this machine's CPU (issue 28: neuron at least llama-server's): the
# Qwen3-Embedding-0.6B shape (Qwen3-0.6B, random weights from `neuron gen-model --seed 3`, the Qwen
# tokenizer) served by neuron (--task embed --pooling last, CPU) and by `llama-server --embeddings
# --pooling last` on the same weights as a bf16 GGUF, driven by client.py with the same requests:
# N ~500-token inputs, C at a time, after WARM others; the servers alternate A B C A B C (seeds 1, 2), and
# the load average is logged before each run (the machine may be shared). neuron's default for an embedder
# rounds the activations to bf16 in the products, as llama.cpp's bf16 product does (backend/cpu/activations.hpp);
# C is neuron again with --cpu-activations f32, the exact path (two bf16 terms of each activation, ~1e-6:
# twice the dot products), the default before 2026-12-06.
# From the repository root:  bash bench/embed/cpu.sh   (N, C, WARM, SEEDS, SIDES, OUT, LLAMA_SERVER, CONVERT in the environment)
# Needs build/neuron (a CPU build), llama-server built from llama.cpp's source for this CPU:
#   cmake -S llama.cpp -B /tmp/llama-cpu-build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
#   cmake --build /tmp/llama-cpu-build --target llama-server
# and the git-ignored .convert/ (run-gpu.sh's; CONVERT names another): qtok/ (the Qwen tokenizer), gguf-py/, convert_hf_to_gguf.py.
# The GGUF comes from llama.cpp's convert_hf_to_gguf.py where it runs; it imports torch and transformers,
# so where those are missing bench/serve/hf_to_gguf.py (numpy and gguf-py only) writes the same file.
set -uo pipefail
root=$(pwd)
N=${N:-64} C=${C:-64} WARM=${WARM:-4} SEEDS=${SEEDS:-1 2}
SIDES=${SIDES:-neuron:18090 llama-server:18091 neuron-f32:18092}
OUT=${OUT:-$root/bench/embed/runs/cpu-$(date -u +%F)}
LLAMA_SERVER=${LLAMA_SERVER:-/tmp/llama-cpu-build/bin/llama-server}
CONVERT=${CONVERT:-$root/.convert}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/embed-cpu.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
log() { echo "$(date -u +%T) $*" | tee -a "$OUT/run.log"; }

log "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(free -g | awk '/Mem:/{print $2 " GiB"}'); N=$N C=$C WARM=$WARM SEEDS=$SEEDS"
build/neuron gen-model --preset qwen3-0.6b --out "$work/emb" --seed 3 >/dev/null || exit 1
cp "$CONVERT"/qtok/* "$work/emb/"
export PYTHONPATH=$CONVERT/gguf-py:$CONVERT
if /usr/bin/python3 "$CONVERT"/convert_hf_to_gguf.py "$work/emb" --outtype bf16 --outfile "$work/emb.gguf" >"$OUT/convert.log" 2>&1; then
  log "gguf: convert_hf_to_gguf.py"
else
  log "gguf: convert_hf_to_gguf.py failed ($(grep -m1 -o "No module named '[a-z_]*'" "$OUT/convert.log" || tail -1 "$OUT/convert.log")); bench/serve/hf_to_gguf.py"
  /usr/bin/python3 bench/serve/hf_to_gguf.py "$work/emb" "$work/emb.gguf" --outtype bf16 >>"$OUT/convert.log" 2>&1 || exit 1
fi

build/neuron serve --model "$work/emb" --task embed --pooling last --port 18090 >"$OUT/neuron.log" 2>&1 &
pids+=($!)
build/neuron serve --model "$work/emb" --task embed --pooling last --cpu-activations f32 --port 18092 >"$OUT/neuron-f32.log" 2>&1 &
pids+=($!)
"$LLAMA_SERVER" -m "$work/emb.gguf" --embeddings --pooling last -c 40960 -np "$C" -b 2048 -ub 2048 --port 18091 \
  >"$OUT/llama.log" 2>&1 &
pids+=($!)
for i in $(seq 300); do
  curl -sf localhost:18090/v1/models | grep -q '"id"' && curl -sf localhost:18092/v1/models | grep -q '"id"' &&
    curl -sf localhost:18091/health >/dev/null && break
  sleep 1
done
log "servers up: $(build/neuron --version 2>/dev/null | head -1), $("$LLAMA_SERVER" --version 2>&1 | grep -m1 version)"

# The two compute the same thing: one text's embeddings agree (cosine) and have the same token count.
/usr/bin/python3 - <<'EOF' | tee -a "$OUT/run.log"
import json, urllib.request
def emb(port):
    body = json.dumps({"model": "emb", "input": "The capital of China is Beijing. " * 20}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", body, {"Content-Type": "application/json"})
    d = json.loads(urllib.request.urlopen(req, timeout=600).read())
    return d["data"][0]["embedding"], d["usage"]["prompt_tokens"]
def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5
(a, ta), (b, tb), (c, tc) = emb(18090), emb(18091), emb(18092)
print(f"check: cosine(neuron, llama-server) = {cos(a, b):.6f}, cosine(neuron, neuron-f32) = {cos(a, c):.6f}, "
      f"dims {len(a)}/{len(b)}/{len(c)}, prompt tokens {ta}/{tb}/{tc}")
EOF

for seed in $SEEDS; do
  for side in $SIDES; do
    log "run $seed ${side%%:*}: loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    python3 bench/embed/client.py "http://127.0.0.1:${side##*:}" emb "$N" "$C" "$seed" "$WARM" |
      sed "s/^{/{\"server\": \"${side%%:*}\", \"loadavg_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", /" | tee -a "$OUT/results.jsonl"
  done
done
log "done: loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
