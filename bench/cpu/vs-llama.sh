#!/usr/bin/env bash
# Issue 14's CPU comparison: neuron and llama.cpp side by side on this machine,
# on the same files: a random-weight Qwen3-0.6B (neuron gen-model) as bf16
# safetensors, the same weights as a bf16 GGUF (gguf-py), and that GGUF
# quantized by llama-quantize to Q8_0 and Q4_K_M. Both engines use THREADS threads.
#   bash bench/cpu/vs-llama.sh
# llama.cpp: llama-bench -p P -n 0 (prefill), then -p 0 -n GEN -d P (decode
# after P tokens of context), -r REPS -t THREADS, on each GGUF, for each P in PROMPTS.
# neuron: neuron generate --repeat REPS on each GGUF (and the safetensors),
# prompt P random ids (OMP_NUM_THREADS=THREADS), GEN tokens, greedy, ignore_eos; its --json timings
# (decode over all runs, prefill of the last, warm run).
# Knobs: NEURON=build/neuron OUT=.serve-out/cpu-vs-llama PROMPTS="128" (or PROMPT=128) GEN=32
# REPS=3 ROUNDS=1 THREADS=2 LLAMA_BUILD=.llama/build-cpu (kept between runs), LLAMA_FLAGS (its
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
GEN=${GEN:-32}
REPS=${REPS:-3}
PROMPTS=${PROMPTS:-${PROMPT:-128}}
ROUNDS=${ROUNDS:-1}
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

# PROMPTS lengths, ROUNDS rounds; each round measures every (prompt, file) pair with both engines back to
# back, llama.cpp first in odd rounds and neuron first in even ones, so a shared host's slow spell falls on
# both (results.jsonl: one line per engine, kind, prompt, file and round; a table of them at the end).
llama_pair() {  # round prompt file
  "$LLAMA_BUILD/bin/llama-bench" -m "$WORK/0.6b-$3.gguf" -t "$THREADS" -p "$2" -n 0 -r "$REPS" -o jsonl 2>>"$OUT/run.log"
  "$LLAMA_BUILD/bin/llama-bench" -m "$WORK/0.6b-$3.gguf" -t "$THREADS" -p 0 -n "$GEN" -d "$2" -r "$REPS" -o jsonl 2>>"$OUT/run.log"
}
llama_rows() {  # round prompt file < llama-bench jsonl
  "$PYTHON" -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    kind = 'prefill' if r['n_prompt'] else 'decode'
    print(json.dumps({'engine': 'llama.cpp', 'file': '$3', 'prompt': $2, 'round': $1, 'kind': kind, 'tok_s': r['avg_ts'], 'stddev': r['stddev_ts'], 'load': '$(cut -d' ' -f1 /proc/loadavg)'}))"
}
neuron_rows() {  # round prompt label model
  OMP_NUM_THREADS=$THREADS "$NEURON" generate --model "$4" --device cpu --prompt-ids "$(prompt_ids "$2")" \
    --max-tokens $((GEN + 1)) --ignore-eos --temperature 0 --repeat "$REPS" --json 2>>"$OUT/run.log" | tail -1 | "$PYTHON" -c "
import json, sys
t = json.loads(sys.stdin.read())['timings']
for kind in ('prefill', 'decode'):
    print(json.dumps({'engine': 'neuron', 'file': '$3', 'prompt': $2, 'round': $1, 'kind': kind, 'tok_s': t[kind + '_tok_s'], 'load': '$(cut -d' ' -f1 /proc/loadavg)'}))"
}
prompt_ids() { "$PYTHON" -c "import random; r = random.Random(7); print(','.join(str(r.randrange(1000, 150000)) for _ in range($1)))"; }
for round in $(seq "$ROUNDS"); do
  for prompt in $PROMPTS; do
    for f in bf16 Q8_0 Q4_K_M; do
      order="llama neuron"; [ $((round % 2)) = 0 ] && order="neuron llama"
      for engine in $order; do
        log "round $round prompt $prompt $f: $engine (load $(cut -d' ' -f1-3 /proc/loadavg))"
        if [ "$engine" = llama ]; then
          llama_pair "$round" "$prompt" "$f" | llama_rows "$round" "$prompt" "$f" | tee -a "$OUT/results.jsonl"
        else
          neuron_rows "$round" "$prompt" "$f" "$WORK/0.6b-$f.gguf" | tee -a "$OUT/results.jsonl"
          [ "$f" = bf16 ] && neuron_rows "$round" "$prompt" "bf16 safetensors" "$WORK/0.6b" | tee -a "$OUT/results.jsonl"
        fi
      done
    done
  done
done
"$PYTHON" - "$OUT/results.jsonl" <<'PY' | tee -a "$OUT/run.log"
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[(r['prompt'], r['kind'], r['file'], r['engine'])].append(r['tok_s'])
print('tok/s llama.cpp / neuron, one pair a round')
for prompt in sorted({r['prompt'] for r in rows}):
    for kind in ('prefill', 'decode'):
        for f in ('bf16', 'bf16 safetensors', 'Q8_0', 'Q4_K_M'):
            ll, ne = by[(prompt, kind, 'bf16' if f.startswith('bf16') else f, 'llama.cpp')], by[(prompt, kind, f, 'neuron')]
            if ne:
                pairs = ', '.join(f'{a:.1f} / {b:.1f}' for a, b in zip(ll, ne))
                print(f'{kind} {prompt} {f}: {pairs} (ratio {min(b / a for a, b in zip(ll, ne)):.2f}-{max(b / a for a, b in zip(ll, ne)):.2f}x)')
PY
log "done: $OUT/results.jsonl"
