#!/usr/bin/env bash
# Issue 26 section 3: expert parallelism (whole experts dealt out over the
# ranks, `--expert-parallel`) against the intermediate split (every expert's
# moe_ff split over the ranks, the default) for a Qwen3-MoE on CPU ranks of
# this machine: TP=2, one thread a rank (OMP_NUM_THREADS=1), the same GGUF
# (bench/cuda/moe_gguf.py, e.g. its qwen3-moe-2.4b shape). ROUNDS rounds, the
# two modes alternating (which goes first swaps every round), each
#   neuron generate --model F --device cpu --tensor-parallel 2 [--expert-parallel]
#     --prompt-ids <PROMPT random ids> --max-tokens GEN --ignore-eos --temperature 0 --repeat REPS --json
# with the load average logged before each. Results: $OUT/results.jsonl and $OUT/run.log.
#   F=/tmp/moe-q8_0.gguf bash bench/cpu/moe-ep.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/cpu-moe-ep}
NEURON=${NEURON:-$root/build/neuron}
F=${F:?a qwen3moe GGUF (bench/cuda/moe_gguf.py)}
PROMPT=${PROMPT:-128} GEN=${GEN:-32} REPS=${REPS:-2} ROUNDS=${ROUNDS:-3} TP=${TP:-2}
mkdir -p "$OUT"
: >"$OUT/results.jsonl"
log() { echo "$(date +%T) $*" | tee -a "$OUT/run.log"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
log "moe-ep: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cpus, load $(load), $F ($(du -h "$F" | cut -f1))"
ids=$(/usr/bin/python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(1000,150000)) for _ in range($PROMPT)))")
run() {  # $1 round, $2 mode (split | ep)
  local flag=()
  [[ $2 == ep ]] && flag=(--expert-parallel)
  log "round $1 $2, load $(load)"
  local l
  l=$(load)
  OMP_NUM_THREADS=1 "$NEURON" generate --model "$F" --device cpu --tensor-parallel "$TP" "${flag[@]}" --prompt-ids "$ids" \
    --max-tokens "$GEN" --ignore-eos --temperature 0 --repeat "$REPS" --json 2>"$OUT/neuron-$2.err" | tail -1 |
    /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'mode':'$2','round':$1,'load':'$l','tokens':d['tokens'],**d['timings']}))" \
    >>"$OUT/results.jsonl" || { log "round $1 $2 failed"; tail -3 "$OUT/neuron-$2.err"; }
}
for round in $(seq "$ROUNDS"); do
  if ((round % 2)); then run "$round" split; run "$round" ep; else run "$round" ep; run "$round" split; fi
done
/usr/bin/python3 - "$OUT/results.jsonl" <<'PY' | tee -a "$OUT/run.log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for d in rows:
    print(f"round {d['round']} {d['mode']:5}: prefill {d['prefill_tok_s']:.1f} tok/s, decode {d['decode_tok_s']:.2f} tok/s (load {d['load']})")
same = len({tuple(d['tokens']) for d in rows}) == 1
print("greedy tokens identical across modes and rounds:", same)
PY
