#!/usr/bin/env bash
# Q4_K_M decode beside llama.cpp (issue 30): a random Qwen3-0.6B (neuron
# gen-model) as a bf16 GGUF (gguf-py), quantized by llama.cpp's llama-quantize
# to Q4_K_M; then ROUNDS alternating rounds, for each thread count in THREADS, of
#   llama-bench -m F -t T -p 128 -n 0 -r REPS          (prefill 128)
#   llama-bench -m F -t T -p 0 -n GEN -d 128 -r REPS   (decode after 128 positions)
#   llama-bench -m F -t T -p 0 -n GEN -d 1000 -r 1     (decode after 1000)
#   neuron generate (OMP_NUM_THREADS=T, default activations) with 128 random
#     prompt ids (--repeat REPS) and 1000 (--repeat 1), GEN tokens, once with
#     the Q4_K rows grouped (the default) and once as stored (NEURON_CPU_Q4K_GROUPS=0)
# with the load average logged with each. The caller's environment reaches
# both engines (NEURON_CPU_ISA=avx2 NEURON_CPU_AVX_VNNI=0 OPENBLAS_CORETYPE=Haswell
# for the AVX2 level, with a llama.cpp built without AVX-512 and AVX-VNNI).
#   LLAMA_BIN=/tmp/ll/bin GGUF_PY=.convert/gguf-py bash bench/cpu/q4k-vs-llama.sh
# Results: $OUT/results.jsonl and $OUT/run.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/cpu-q4k-vs-llama}
WORK=${WORK:-$(mktemp -d /tmp/neuron-q4k-vs-llama.XXXXXX)}
NEURON=${NEURON:-$root/build/neuron}
LLAMA_BIN=${LLAMA_BIN:?llama.cpp bin folder}
GGUF_PY=${GGUF_PY:?llama.cpp gguf-py folder}
GEN=${GEN:-32} REPS=${REPS:-2} ROUNDS=${ROUNDS:-2} THREADS=${THREADS:-1 2}
mkdir -p "$OUT"
trap 'rm -rf "$WORK"' EXIT
: >"$OUT/results.jsonl"
log() { echo "$(date +%T) $*" | tee -a "$OUT/run.log"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
log "q4k-vs-llama: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus, load $(load)," \
  "NEURON_CPU_ISA=${NEURON_CPU_ISA:-} NEURON_CPU_AVX_VNNI=${NEURON_CPU_AVX_VNNI:-}"
"$NEURON" gen-model --out "$WORK/0.6b" --preset qwen3-0.6b --copy-tokenizer-from "$root/models/qwen3-tiny-a" \
  >>"$OUT/run.log" 2>&1 || { log "gen-model failed"; exit 1; }
PYTHONPATH=$GGUF_PY /usr/bin/python3 bench/serve/hf_to_gguf.py "$WORK/0.6b" "$WORK/bf16.gguf" --outtype bf16 \
  >>"$OUT/run.log" 2>&1 || { log "hf_to_gguf failed"; exit 1; }
rm -rf "$WORK/0.6b"
F=$WORK/q4_k_m.gguf
"$LLAMA_BIN/llama-quantize" "$WORK/bf16.gguf" "$F" Q4_K_M 2 >"$WORK/quantize.log" 2>&1 ||
  { tail "$WORK/quantize.log"; exit 1; }
rm -f "$WORK/bf16.gguf"
log "Q4_K_M: $(du -h "$F" | cut -f1)"
ids() { /usr/bin/python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(1000,150000)) for _ in range($1)))"; }
ids128=$(ids 128) ids1000=$(ids 1000)
llama() {  # round threads kind args...
  local round=$1 t=$2 kind=$3; shift 3
  log "round $round t $t llama.cpp $kind, load $(load)"
  "$LLAMA_BIN/llama-bench" -m "$F" -t "$t" "$@" -o jsonl 2>/dev/null |
    sed "s/^{/{\"engine\":\"llama.cpp\",\"kind\":\"$kind\",\"round\":$round,\"threads\":$t,\"load\":\"$(load)\",/" >>"$OUT/results.jsonl"
}
neuron() {  # round threads layout prompt-ids prompt reps
  local round=$1 t=$2 layout=$3 p=$5 reps=$6 groups=1
  [ "$layout" = rows ] && groups=0
  log "round $round t $t neuron $layout prompt $p, load $(load)"
  OMP_NUM_THREADS=$t NEURON_CPU_Q4K_GROUPS=$groups "$NEURON" generate --model "$F" --device cpu --prompt-ids "$4" \
    --max-tokens "$GEN" --ignore-eos --temperature 0 --repeat "$reps" --json 2>"$WORK/neuron.err" | tail -1 |
    /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'engine':'neuron','layout':'$layout','prompt':$p,'round':$round,'threads':$t,'load':'$(load)',**d['timings']}))" \
    >>"$OUT/results.jsonl" || { log "neuron failed"; tail -5 "$WORK/neuron.err" | tee -a "$OUT/run.log"; }
}
for round in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    # Odd rounds llama.cpp first, even rounds neuron first.
    first=llama; [ $((round % 2)) = 0 ] && first=neuron
    for engine in $first $([ $first = llama ] && echo neuron || echo llama); do
      if [ "$engine" = llama ]; then
        llama "$round" "$t" prefill -p 128 -n 0 -r "$REPS"
        llama "$round" "$t" decode128 -p 0 -n "$GEN" -d 128 -r "$REPS"
        llama "$round" "$t" decode1000 -p 0 -n "$GEN" -d 1000 -r 1
      else
        for layout in grouped rows; do
          neuron "$round" "$t" "$layout" "$ids128" 128 "$REPS"
          neuron "$round" "$t" "$layout" "$ids1000" 1000 1
        done
      fi
    done
  done
done
/usr/bin/python3 - "$OUT/results.jsonl" <<'PY' | tee -a "$OUT/run.log"
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["engine"] == "neuron":
        print(f"round {d['round']} t {d['threads']} neuron {d['layout']} prompt {d['prompt']}: prefill "
              f"{d['prefill_tok_s']:.1f}, decode {d['decode_tok_s']:.1f} tok/s (load {d['load']})")
    else:
        print(f"round {d['round']} t {d['threads']} llama.cpp {d['kind']}: {d['avg_ts']:.1f} tok/s (load {d['load']})")
PY
