# Shared by run-h200.sh and run-cpu.sh (sourced, not run). Expects:
#   NEURON  the neuron command (e.g. "build/neuron" or ".bundle/run neuron")
#   OUT     where results go: results.jsonl (one JSON line per level, labelled),
#           run.log (the tables and every step, with times), servers.log (server logs)
#   WORK    scratch directory for checkpoints and GGUF files (removed by the caller's trap)
# Every server started here is stopped by stop_servers (call it from an EXIT trap).

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
# The GGUF writer needs numpy: fall back to the system python3 when the first one lacks it.
if ! "$PYTHON" -c 'import numpy' 2>/dev/null && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  PYTHON=/usr/bin/python3
fi
SERVER_PIDS=()

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/run.log" >&2; }

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

stop_pid() {  # SIGTERM, then SIGKILL after 30 s
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then log "pid $pid ignored SIGTERM for 30 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

stop_servers() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do stop_pid "$pid"; done
  SERVER_PIDS=()
}

# Appends a server's log to servers.log under a header.
keep_log() { { echo "===== $1"; cat "$2"; } >>"$OUT/servers.log" 2>/dev/null || true; }

# start_neuron NAME MODEL_SPEC [serve flags...]: sets URL and PID; waits until the model is loaded.
start_neuron() {
  local name=$1 spec=$2; shift 2
  local port; port=$(free_port)
  local slog="$WORK/$name.serve.log"
  log "neuron serve $spec on port $port"
  # shellcheck disable=SC2086
  $NEURON serve --host 127.0.0.1 --port "$port" --model "$spec" --queue-depth 1024 --threads 256 "$@" >"$slog" 2>&1 &
  PID=$!
  SERVER_PIDS+=("$PID")
  URL="http://127.0.0.1:$port"
  if ! "$PYTHON" "$here/wait_ready.py" "$URL" "$PID" "${READY_TIMEOUT:-900}" 2>>"$OUT/run.log"; then
    log "neuron serve ($name) did not become ready; its log:"; tail -30 "$slog" | tee -a "$OUT/run.log" >&2
    return 1
  fi
  log "neuron serve ($name) ready"
}

# start_llama NAME GGUF PARALLEL CONTEXT [llama-server flags...]: sets URL and PID.
start_llama() {
  local name=$1 gguf=$2 np=$3 ctx=$4; shift 4
  local port; port=$(free_port)
  local slog="$WORK/$name.server.log"
  log "llama-server $gguf -np $np -c $ctx on port $port $*"
  "$LLAMA_SERVER" -m "$gguf" --host 127.0.0.1 --port "$port" -np "$np" -c "$ctx" --cont-batching \
    --threads-http 256 --no-webui "$@" >"$slog" 2>&1 &
  PID=$!
  SERVER_PIDS+=("$PID")
  URL="http://127.0.0.1:$port"
  if ! "$PYTHON" "$here/wait_ready.py" "$URL" "$PID" "${READY_TIMEOUT:-900}" 2>>"$OUT/run.log"; then
    log "llama-server ($name) did not become ready; its log:"; tail -30 "$slog" | tee -a "$OUT/run.log" >&2
    return 1
  fi
  log "llama-server ($name) ready"
}

# stop_server NAME: stops the last started server and keeps its log.
stop_server() {
  [ -n "${PID:-}" ] && stop_pid "$PID"
  local f
  for f in "$WORK/$1.serve.log" "$WORK/$1.server.log"; do [ -f "$f" ] && keep_log "$1" "$f"; done
  local keep=()
  for p in "${SERVER_PIDS[@]}"; do [ "$p" != "$PID" ] && keep+=("$p"); done
  SERVER_PIDS=("${keep[@]}")
  PID=
}

# bench LABEL [bench-serve flags...]: against $URL; table to run.log, JSON lines to results.jsonl.
# A level with failed requests is reported (and bench-serve exits 1) but does not stop the script.
bench() {
  local label=$1; shift
  log "bench-serve $label: $*"
  local rc=0
  # shellcheck disable=SC2086
  $NEURON bench-serve --url "$URL" --label "$label" --json-out "$OUT/results.jsonl" "$@" 2>&1 | tee -a "$OUT/run.log" || rc=$?
  [ "$rc" = 0 ] || log "bench-serve $label exited $rc (errors are listed above and counted in results.jsonl)"
}

# gen_model DIR PRESET: a random-weight checkpoint of a real Qwen3 shape with the real tokenizer.
gen_model() {
  local dir=$1 preset=$2 t0=$SECONDS
  rm -rf "$dir"
  $NEURON gen-model --out "$dir" --preset "$preset" --shards "${3:-1}" --copy-tokenizer-from "$root/models/qwen3-tiny-a" >>"$OUT/run.log" 2>&1
  log "gen-model $preset -> $dir in $((SECONDS - t0)) s ($(du -sh "$dir" | cut -f1))"
}

# to_gguf DIR OUT.gguf: the same weights as a GGUF (llama.cpp's gguf-py from .llama/src).
to_gguf() {
  local t0=$SECONDS
  llama_source || return 1
  if ! PYTHONPATH="$LLAMA_SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$here/hf_to_gguf.py" "$1" "$2" --outtype "${GGUF_TYPE:-f16}" 2>&1 | tee -a "$OUT/run.log" >&2; then
    log "hf_to_gguf $1 failed"
    return 1
  fi
  log "hf_to_gguf $1 -> $2 in $((SECONDS - t0)) s"
}

# llama_source: llama.cpp's source in .llama/llama.cpp, from .llama/llama-src.tar.xz
# (bench/serve/prepare-llama.sh) or else .llama/gitRelease.bundle (node-llama-cpp's copy).
LLAMA_SRC="$root/.llama/llama.cpp"
llama_source() {
  local tarball="$root/.llama/llama-src.tar.xz" bundle="$root/.llama/gitRelease.bundle" stamp
  if [ -f "$tarball" ]; then
    stamp="tarball $(cksum <"$tarball")"
  elif [ -f "$bundle" ]; then
    stamp="bundle $(cksum <"$bundle")"
  else
    log "no .llama/llama-src.tar.xz or .llama/gitRelease.bundle: run bench/serve/prepare-llama.sh (bench/SERVE.md)"
    return 1
  fi
  if [ "$(cat "$LLAMA_SRC/.neuron-stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$LLAMA_SRC"
    if [ -f "$tarball" ]; then
      mkdir -p "$LLAMA_SRC" && xz -dc "$tarball" | tar -x -C "$LLAMA_SRC" --strip-components=1 || return 1
    else
      git clone -q "$bundle" "$LLAMA_SRC" 2>>"$OUT/run.log" || return 1
    fi
    echo "$stamp" >"$LLAMA_SRC/.neuron-stamp"
  fi
  [ -f "$tarball" ] && stamp="$stamp: $(tr '\n' ' ' <"$root/.llama/llama-src.txt" 2>/dev/null)"
  [ -f "$tarball" ] || stamp="$stamp: commit $(git -C "$LLAMA_SRC" rev-parse --short HEAD 2>/dev/null)"
  log "llama.cpp source: $stamp"
}

# build_llama BUILD_DIR [cmake flags...]: builds llama-server (or LLAMA_TARGETS; static, no downloads) and sets LLAMA_SERVER.
build_llama() {
  local build=$1; shift
  local t0=$SECONDS
  llama_source || return 1
  # cmake and ninja may come with python3's environment (the GPU machine's pip packages).
  command -v cmake >/dev/null || PATH="$(dirname "$(command -v "$PYTHON")"):$PATH"
  command -v cmake >/dev/null || { log "no cmake"; return 1; }
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$LLAMA_SRC" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF "$@" >"$WORK/llama-cmake.log" 2>&1 || { tail -30 "$WORK/llama-cmake.log" | tee -a "$OUT/run.log"; return 1; }
  # shellcheck disable=SC2086
  cmake --build "$build" --target ${LLAMA_TARGETS:-llama-server} -j "${LLAMA_JOBS:-$(nproc)}" >"$WORK/llama-build.log" 2>&1 ||
    { tail -40 "$WORK/llama-build.log" | tee -a "$OUT/run.log"; return 1; }
  LLAMA_SERVER="$build/bin/llama-server"
  log "built $LLAMA_SERVER in $((SECONDS - t0)) s"
}
