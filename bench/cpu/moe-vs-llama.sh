#!/usr/bin/env bash
# Issue 26's CPU criterion: a ~2.4B-parameter Qwen3-MoE (32 experts, 8 a token,
# 0.84B active) at Q4_K_M, neuron and llama.cpp side by side on this machine
# on the same file. bench/cuda/moe_gguf.py writes the random bf16 GGUF (its
# "qwen3-moe-2.4b" shape), llama.cpp's llama-quantize makes the Q4_K_M; then
# ROUNDS alternating rounds of
#   llama-bench -m F -p PROMPT -n 0 -t THREADS -r REPS    (prefill)
#   llama-bench -m F -p 0 -n GEN -d PROMPT -t THREADS -r REPS  (decode after PROMPT tokens)
#   neuron generate --model F --device cpu --prompt-ids <PROMPT random ids> --max-tokens GEN
#     --ignore-eos --temperature 0 --repeat REPS --json   (its default activations)
# (once per LAYOUTS entry) with the load average logged before each. Needs llama.cpp built for this CPU
# with the llama-bench and llama-quantize targets at LLAMA_BIN, and gguf-py on
# GGUF_PY (llama.cpp's gguf-py). Results: $OUT/results.jsonl and $OUT/run.log.
#   LLAMA_BIN=/tmp/llcpu/b/bin GGUF_PY=.convert/gguf-py bash bench/cpu/moe-vs-llama.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/cpu-moe-vs-llama}
WORK=${WORK:-$(mktemp -d /tmp/neuron-moe-vs-llama.XXXXXX)}
NEURON=${NEURON:-$root/build/neuron}
LLAMA_BIN=${LLAMA_BIN:?llama.cpp bin folder}
GGUF_PY=${GGUF_PY:?llama.cpp gguf-py folder}
TOKENIZER=${TOKENIZER:-$root/models/qwen3-tiny-a}
PROMPT=${PROMPT:-128} GEN=${GEN:-32} REPS=${REPS:-2} ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-2}
# neuron's Q4_K layouts: grouped (the default where the AVX2 int8 kernels take the products,
# gemm_quant_grouped.hpp) and rows (NEURON_CPU_Q4K_GROUPS=0, as stored).
LAYOUTS=${LAYOUTS:-grouped rows}
mkdir -p "$OUT"
trap 'rm -rf "$WORK"' EXIT
: >"$OUT/results.jsonl"
log() { echo "$(date +%T) $*" | tee -a "$OUT/run.log"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
log "moe-vs-llama: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus, load $(load)"
PYTHONPATH=$GGUF_PY /usr/bin/python3 bench/cuda/moe_gguf.py "$WORK/moe-bf16.gguf" --tokenizer "$TOKENIZER" \
  --shape qwen3-moe-2.4b --type bf16 | tee -a "$OUT/run.log" || exit 1
"$LLAMA_BIN/llama-quantize" "$WORK/moe-bf16.gguf" "$WORK/moe-q4_k_m.gguf" Q4_K_M "$THREADS" >"$WORK/quantize.log" 2>&1 ||
  { tail "$WORK/quantize.log"; exit 1; }
rm -f "$WORK/moe-bf16.gguf"
F=$WORK/moe-q4_k_m.gguf
log "Q4_K_M: $(du -h "$F" | cut -f1)"
ids=$(/usr/bin/python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(1000,150000)) for _ in range($PROMPT)))")
for round in $(seq "$ROUNDS"); do
  log "round $round llama prefill, load $(load)"
  "$LLAMA_BIN/llama-bench" -m "$F" -p "$PROMPT" -n 0 -t "$THREADS" -r "$REPS" -o jsonl 2>/dev/null |
    sed "s/^{/{\"engine\":\"llama.cpp\",\"kind\":\"prefill\",\"round\":$round,\"load\":\"$(load)\",/" >>"$OUT/results.jsonl"
  log "round $round llama decode, load $(load)"
  "$LLAMA_BIN/llama-bench" -m "$F" -p 0 -n "$GEN" -d "$PROMPT" -t "$THREADS" -r "$REPS" -o jsonl 2>/dev/null |
    sed "s/^{/{\"engine\":\"llama.cpp\",\"kind\":\"decode\",\"round\":$round,\"load\":\"$(load)\",/" >>"$OUT/results.jsonl"
  for layout in $LAYOUTS; do
    groups=1; [ "$layout" = rows ] && groups=0
    log "round $round neuron $layout, load $(load)"
    NEURON_CPU_Q4K_GROUPS=$groups "$NEURON" generate --model "$F" --device cpu --prompt-ids "$ids" --max-tokens "$GEN" \
      --ignore-eos --temperature 0 --repeat "$REPS" --json 2>"$WORK/neuron.err" | tail -1 |
      /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'engine':'neuron','layout':'$layout','round':$round,'load':'$(load)',**d['timings']}))" \
      >>"$OUT/results.jsonl"
    grep -h 'cpu: ' "$WORK/neuron.err" | sed 's/^/    /' >>"$OUT/run.log"  # its kernels and layout
  done
done
/usr/bin/python3 - "$OUT/results.jsonl" <<'PY' | tee -a "$OUT/run.log"
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["engine"] == "neuron":
        print(f"round {d['round']} neuron {d.get('layout', '')}: prefill {d['prefill_tok_s']:.1f} tok/s, decode {d['decode_tok_s']:.1f} tok/s (load {d['load']})")
    else:
        print(f"round {d['round']} llama.cpp {d['kind']}: {d['avg_ts']:.1f} tok/s (load {d['load']})")
PY
