#!/usr/bin/env bash
# The serving benchmark of run-h200.sh on this machine's CPU: neuron serve with
# the bundled tiny model and a random-weight Qwen3-0.6B (neuron gen-model),
# and, when llama.cpp's source is in .llama/ (bench/SERVE.md), llama-server
# (CPU build) with the same weights as GGUF files. Proves the tool chain end
# to end; the numbers are a CPU baseline.
#   bash bench/serve/run-cpu.sh [PHASE...]
# PHASE: all (default) | neuron | llama | neuron-tiny | neuron-0.6b | llama-tiny | llama-0.6b
# Knobs: NEURON=build/neuron OUT=.serve-out/cpu TINY_LEVELS=1,8,32,64,128
# Q06_LEVELS=1,2,4 PROMPT=128 TINY_GEN=128 Q06_GEN=32 RPC=2 NP=64 (llama-server
# slots for tiny) Q06_NP=4 LLAMA=1 (0: neuron only) GGUF_TYPE=f16|bf16.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/cpu}
WORK=${WORK:-$(mktemp -d /tmp/neuron-bench-serve-cpu.XXXXXX)}
NEURON=${NEURON:-$root/build/neuron}
TINY_LEVELS=${TINY_LEVELS:-1,8,32,64,128}
Q06_LEVELS=${Q06_LEVELS:-1,2,4}
PROMPT=${PROMPT:-128}
TINY_GEN=${TINY_GEN:-128}
Q06_GEN=${Q06_GEN:-32}
RPC=${RPC:-2}
NP=${NP:-64}
Q06_NP=${Q06_NP:-4}
LLAMA=${LLAMA:-1}
mkdir -p "$OUT" "$WORK"
source "$root/bench/serve/lib.sh"
trap 'stop_servers; rm -rf "$WORK"' EXIT

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(all)
want() {
  local p
  for p in "${phases[@]}"; do
    case "$p" in all | "$1" | "${1%%-*}") [ "${1%%-*}" = llama ] && [ "$LLAMA" != 1 ] && return 1; return 0 ;; esac
  done
  return 1
}

log "run-cpu.sh ${phases[*]}: tiny levels $TINY_LEVELS gen $TINY_GEN, 0.6b levels $Q06_LEVELS gen $Q06_GEN, prompt $PROMPT, $RPC requests per client"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') x $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg)"
} >>"$OUT/run.log" 2>&1
$NEURON --version >>"$OUT/run.log" 2>&1 || { log "cannot run $NEURON"; exit 1; }

LLAMA_SERVER=
if want llama-tiny || want llama-0.6b; then
  build_llama "$root/.llama/build-cpu" -DGGML_NATIVE=ON || { log "llama.cpp build failed: neuron only"; LLAMA=0; }
fi

tiny=(--concurrency "$TINY_LEVELS" --prompt-len "$PROMPT" --gen "$TINY_GEN" --requests-per-client "$RPC" --warmup 2)
q06=(--concurrency "$Q06_LEVELS" --prompt-len "$PROMPT" --gen "$Q06_GEN" --requests-per-client "$RPC" --warmup 1)

if want neuron-tiny; then
  start_neuron neuron-tiny "$root/models/qwen3-tiny-a" && bench "neuron qwen3-tiny-a cpu" "${tiny[@]}"
  stop_server neuron-tiny
fi
if want llama-tiny; then
  to_gguf "$root/models/qwen3-tiny-a" "$WORK/tiny.gguf" &&
    start_llama llama-tiny "$WORK/tiny.gguf" "$NP" $((NP * (PROMPT + TINY_GEN + 64))) -t "$(nproc)" &&
    bench "llama.cpp qwen3-tiny-a cpu np=$NP" "${tiny[@]}"
  stop_server llama-tiny
fi
if want neuron-0.6b || want llama-0.6b; then
  gen_model "$WORK/0.6b" qwen3-0.6b 1
  if want neuron-0.6b; then
    start_neuron neuron-0.6b "$WORK/0.6b" && bench "neuron qwen3-0.6b cpu" "${q06[@]}"
    stop_server neuron-0.6b
  fi
  if want llama-0.6b; then
    to_gguf "$WORK/0.6b" "$WORK/0.6b.gguf" &&
      start_llama llama-0.6b "$WORK/0.6b.gguf" "$Q06_NP" $((Q06_NP * (PROMPT + Q06_GEN + 64))) -t "$(nproc)" &&
      bench "llama.cpp qwen3-0.6b cpu np=$Q06_NP" "${q06[@]}"
    stop_server llama-0.6b
  fi
fi
log "done: $(cat "$OUT/results.jsonl" 2>/dev/null | wc -l) level(s) in $OUT/results.jsonl"
