#!/usr/bin/env bash
# Issue 14's CPU comparison: neuron and llama.cpp side by side on this machine,
# on the same files: a random-weight Qwen3-0.6B (neuron gen-model) as bf16
# safetensors, the same weights as a bf16 GGUF (gguf-py), and that GGUF
# quantized by llama-quantize to Q8_0 and Q4_K_M. Both engines use 2 threads.
#   bash bench/cpu/vs-llama.sh
# llama.cpp: llama-bench -p PROMPT -n 0 (prefill), then -p 0 -n GEN -d PROMPT (decode
# after PROMPT tokens of context), -r REPS -t THREADS, on each GGUF.
# neuron: neuron generate --repeat REPS on each GGUF (and the safetensors),
# prompt PROMPT random ids, GEN tokens, greedy, ignore_eos; its --json timings
# (decode over all runs, prefill of the last, warm run).
# Knobs: NEURON=build/neuron OUT=.serve-out/cpu-vs-llama PROMPT=128 GEN=32 REPS=3
# THREADS=2 LLAMA_BUILD=.llama/build-cpu (kept between runs), LLAMA_FLAGS (its
# cmake flags; default -DGGML_NATIVE=ON).
# An AVX2-only CPU (Zen 1-3) emulated on a newer one: both engines at that level,
#   NEURON_CPU_ISA=avx2 NEURON_CPU_AVX_VNNI=0 OPENBLAS_CORETYPE=Haswell \
#   LLAMA_BUILD=.llama/build-avx2 LLAMA_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
#     -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF" bash bench/cpu/vs-llama.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/cpu-vs-llama}
WORK=${WORK:-$(mktemp -d /tmp/neuron-vs-llama.XXXXXX)}
NEURON=${NEURON:-$root/build/neuron}
PROMPT=${PROMPT:-128}
GEN=${GEN:-32}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
LLAMA_BUILD=${LLAMA_BUILD:-$root/.llama/build-cpu}
mkdir -p "$OUT" "$WORK"
source "$root/bench/serve/lib.sh"
trap 'rm -rf "$WORK"' EXIT
: >"$OUT/results.jsonl"

log "vs-llama: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
# llama.cpp's native build on a CPU with AMX (Sapphire Rapids) compiles its
# AMX path for quantized types, which segfaulted in ggml_backend_amx_mul_mat
# on this project's Intel guest (2026-12-04, Q8_0 and Q4_K_M). There the
# build is every AVX-512 extension the CPU has (VNNI, VBMI, BF16) but AMX.
if grep -q amx_tile /proc/cpuinfo; then
  LLAMA_FLAGS=${LLAMA_FLAGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON}
  LLAMA_BUILD=${LLAMA_BUILD_NOAMX:-$root/.llama/build-cpu-noamx}
fi
if [ ! -x "$LLAMA_BUILD/bin/llama-bench" ] || [ ! -x "$LLAMA_BUILD/bin/llama-quantize" ]; then
  # shellcheck disable=SC2086
  LLAMA_TARGETS="llama-bench llama-quantize" build_llama "$LLAMA_BUILD" ${LLAMA_FLAGS:--DGGML_NATIVE=ON} || exit 1
fi
log "llama.cpp build: $LLAMA_BUILD (${LLAMA_FLAGS:--DGGML_NATIVE=ON})"
gen_model "$WORK/0.6b" qwen3-0.6b || exit 1
GGUF_TYPE=bf16 to_gguf "$WORK/0.6b" "$WORK/0.6b-bf16.gguf" || exit 1
for q in Q8_0 Q4_K_M; do
  "$LLAMA_BUILD/bin/llama-quantize" "$WORK/0.6b-bf16.gguf" "$WORK/0.6b-$q.gguf" "$q" "$THREADS" >>"$OUT/run.log" 2>&1 ||
    { log "llama-quantize $q failed"; exit 1; }
  log "llama-quantize $q: $(du -h "$WORK/0.6b-$q.gguf" | cut -f1)"
done

ids=$("$PYTHON" -c "import random; r = random.Random(7); print(','.join(str(r.randrange(1000, 150000)) for _ in range($PROMPT)))")
for f in bf16 Q8_0 Q4_K_M; do
  gguf="$WORK/0.6b-$f.gguf"
  log "llama-bench $f"
  # Prefill from an empty context; decode after PROMPT tokens of it (-d), as neuron's decode follows its prompt.
  { "$LLAMA_BUILD/bin/llama-bench" -m "$gguf" -t "$THREADS" -p "$PROMPT" -n 0 -r "$REPS" -o jsonl 2>>"$OUT/run.log"
    "$LLAMA_BUILD/bin/llama-bench" -m "$gguf" -t "$THREADS" -p 0 -n "$GEN" -d "$PROMPT" -r "$REPS" -o jsonl 2>>"$OUT/run.log"; } |
    "$PYTHON" -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    kind = 'prefill' if r['n_prompt'] else 'decode'
    print(json.dumps({'engine': 'llama.cpp', 'file': '$f', 'kind': kind, 'tok_s': r['avg_ts'], 'stddev': r['stddev_ts'], 'n': r['n_prompt'] or r['n_gen']}))
" | tee -a "$OUT/results.jsonl"
  for model in "$gguf" $([ "$f" = bf16 ] && echo "$WORK/0.6b"); do
    label=$f; [ -d "$model" ] && label="bf16 safetensors"
    log "neuron generate $label"
    "$NEURON" generate --model "$model" --device cpu --prompt-ids "$ids" --max-tokens $((GEN + 1)) --ignore-eos \
      --temperature 0 --repeat "$REPS" --json 2>>"$OUT/run.log" | tail -1 | "$PYTHON" -c "
import json, sys
r = json.loads(sys.stdin.read())
t = r['timings']
print(json.dumps({'engine': 'neuron', 'file': '$label', 'kind': 'prefill', 'tok_s': t['prefill_tok_s'], 'n': $PROMPT}))
print(json.dumps({'engine': 'neuron', 'file': '$label', 'kind': 'decode', 'tok_s': t['decode_tok_s'], 'n': $GEN}))
" | tee -a "$OUT/results.jsonl"
  done
done
log "done: $OUT/results.jsonl"
