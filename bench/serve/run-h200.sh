#!/usr/bin/env bash
# Serving benchmark on one H200: neuron serve and llama.cpp's llama-server, the
# same random-weight Qwen3-8B and Qwen3-0.6B (bf16 checkpoints from
# `neuron gen-model`; llama.cpp gets the same weights as a GGUF), driven by
# `neuron bench-serve` at 1, 8, 32, 64 and 128 concurrent streaming clients.
#
# Run from the repo root on the GPU machine, with a neuron CUDA bundle at
# .bundle (device-bundle .bundle build-cuda/neuron) and llama.cpp's source as
# .llama/gitRelease.bundle (bench/SERVE.md says how to get it):
#   bash bench/serve/run-h200.sh [PHASE...]
# PHASE: all (default) | 8b | 0.6b | neuron | llama | neuron-8b | llama-8b | neuron-0.6b | llama-0.6b
# (all does not fit one 10-minute device call: run `8b`, then `0.6b` with the
# llama-server binary the first call hands back; bench/SERVE.md).
# Results: $OUT/results.jsonl (one JSON line per level, "label" names server
# and model), $OUT/run.log (tables, timings, nvidia-smi), $OUT/servers.log.
# After a llama build, $OUT/llama-server-cuda.xz.part-* is the built binary:
# cat them into .llama/llama-server-cuda.xz and carry .llama to skip the
# build next time.
#
# Knobs (environment): LEVELS=1,8,32,64,128 PROMPT=128 GEN=128 DURATION=10
# (seconds per level in which each client starts requests; requests in flight
# then finish) or RPC=N (N requests per client instead) NP=64 (llama-server
# slots) GGUF_TYPE=f16|bf16
# NEURON_OPTS=,max_context=N (appended to neuron's model spec) LLAMA_ARGS=...
# (extra llama-server flags). For a smoke test of this script without a GPU:
# DEVICE=cpu LLAMA_CMAKE_ARGS=-DGGML_NATIVE=ON LLAMA_BUILD=.llama/build-cpu.
# LLAMA_OVERLAP=1 (build llama.cpp in the background, niced, while neuron runs;
# 0 builds it first, alone) WORK=/tmp/neuron-bench-serve (scratch, removed).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.serve-out/h200}
WORK=${WORK:-/tmp/neuron-bench-serve}
NEURON=${NEURON:-$root/.bundle/run neuron}
LEVELS=${LEVELS:-1,8,32,64,128}
PROMPT=${PROMPT:-128}
GEN=${GEN:-128}
DURATION=${DURATION:-10}
RPC=${RPC:-}
NP=${NP:-64}
LLAMA_OVERLAP=${LLAMA_OVERLAP:-1}
DEVICE=${DEVICE:-cuda:0}
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:--DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DGGML_CUDA_NCCL=OFF}
mkdir -p "$OUT" "$WORK"
source "$root/bench/serve/lib.sh"
BUILD_PID=
cleanup() {
  stop_servers
  if [ -n "$BUILD_PID" ] && kill -0 "$BUILD_PID" 2>/dev/null; then kill -TERM -- "-$BUILD_PID" 2>/dev/null || kill -TERM "$BUILD_PID"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(all)
want() {  # want SERVER-MODEL: asked for directly, or through all, the server or the model?
  local p
  for p in "${phases[@]}"; do
    case "$p" in all | "$1" | "${1%%-*}" | "${1#*-}") return 0 ;; esac
  done
  return 1
}

if [ -n "$RPC" ]; then per_level=(--requests-per-client "$RPC"); else per_level=(--duration "$DURATION"); fi
log "run-h200.sh ${phases[*]}: levels $LEVELS, prompt $PROMPT, gen $GEN, ${per_level[*]}, llama-server -np $NP"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
  df -h "$WORK" | tail -1
} >>"$OUT/run.log" 2>&1
$NEURON --version >>"$OUT/run.log" 2>&1 || { log "cannot run $NEURON"; exit 1; }

# llama-server: a carried binary from an earlier run, or a build (in the background when overlapping).
LLAMA_SERVER=
LLAMA_BUILD=${LLAMA_BUILD:-$root/.llama/build-cuda}
llama_cuda_build() {
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  # shellcheck disable=SC2086
  build_llama "$LLAMA_BUILD" $LLAMA_CMAKE_ARGS || return 1
  # Hand the binary back so the next call can skip the build (the device returns files up to 16 MiB).
  rm -f "$OUT"/llama-server-cuda.xz.part-*
  xz -T0 -6 -c "$LLAMA_SERVER" | split -b 15M - "$OUT/llama-server-cuda.xz.part-"
  log "llama-server binary saved as $(ls "$OUT"/llama-server-cuda.xz.part-* | wc -l) part(s) ($(du -ch "$OUT"/llama-server-cuda.xz.part-* | tail -1 | cut -f1))"
}
if want llama-8b || want llama-0.6b; then
  if [ -f "$root/.llama/llama-server-cuda.xz" ]; then
    mkdir -p "$WORK/llama-bin"
    xz -dc "$root/.llama/llama-server-cuda.xz" >"$WORK/llama-bin/llama-server" && chmod +x "$WORK/llama-bin/llama-server"
    LLAMA_SERVER="$WORK/llama-bin/llama-server"
    log "using the carried .llama/llama-server-cuda.xz"
  elif [ "$LLAMA_OVERLAP" = 1 ] && (want neuron-8b || want neuron-0.6b); then
    log "building llama.cpp in the background (nice 19, $(($(nproc) - 2)) jobs) while neuron runs"
    # Its own session, so cleanup can stop the whole build (cmake, ninja, nvcc) as one group.
    export OUT WORK root here LLAMA_SRC LLAMA_BUILD LLAMA_CMAKE_ARGS PYTHON
    export -f log llama_source build_llama llama_cuda_build
    LLAMA_JOBS=$(($(nproc) - 2)) setsid nice -n 19 bash -c llama_cuda_build >"$WORK/llama-background.log" 2>&1 &
    BUILD_PID=$!
  else
    llama_cuda_build || log "llama.cpp build failed"
  fi
fi
wait_llama() {
  [ -n "$LLAMA_SERVER" ] && return 0
  if [ -n "$BUILD_PID" ]; then
    log "waiting for the llama.cpp build"
    wait "$BUILD_PID" || true
    BUILD_PID=
  fi
  [ -x "$LLAMA_BUILD/bin/llama-server" ] || { log "no llama-server: the build failed (see run.log)"; return 1; }
  LLAMA_SERVER="$LLAMA_BUILD/bin/llama-server"
}

common=(--concurrency "$LEVELS" --prompt-len "$PROMPT" --gen "$GEN" "${per_level[@]}" --warmup 2 --timeout 900)

run_model() {  # run_model NAME PRESET SHARDS
  local name=$1 preset=$2 shards=$3 ckpt="$WORK/$1"
  if want "neuron-$name" || want "llama-$name"; then gen_model "$ckpt" "$preset" "$shards" || { log "gen-model $preset failed"; return 1; }; fi
  if want "neuron-$name"; then
    if start_neuron "neuron-$name" "$ckpt:device=$DEVICE${NEURON_OPTS:-}"; then
      bench "neuron qwen3-$name $DEVICE" "${common[@]}"
    fi
    stop_server "neuron-$name"
  fi
  if want "llama-$name" && wait_llama; then
    local converted=0
    to_gguf "$ckpt" "$WORK/$name.gguf" && converted=1
    rm -rf "$ckpt"  # the disk holds one model twice at most
    # Each slot needs prompt + gen positions (non-unified KV: -c is split evenly over the slots).
    # shellcheck disable=SC2086
    if [ "$converted" = 1 ] && start_llama "llama-$name" "$WORK/$name.gguf" "$NP" $((NP * (PROMPT + GEN + 64))) -ngl 999 ${LLAMA_ARGS:-}; then
      bench "llama.cpp qwen3-$name $DEVICE np=$NP" "${common[@]}"
    fi
    stop_server "llama-$name"
    rm -f "$WORK/$name.gguf"
  fi
  rm -rf "$ckpt"
}

run_model 8b qwen3-8b 4
run_model 0.6b qwen3-0.6b 1
log "done: $(cat "$OUT/results.jsonl" 2>/dev/null | wc -l) level(s) in $OUT/results.jsonl"
