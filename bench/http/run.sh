#!/usr/bin/env bash
# Starts `neuron serve` with the bundled model on a free port, runs
# http_bench.mjs against it, stops the daemon.   Usage: bench/http/run.sh [BUILD/neuron] [bench args...]
set -eu
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${1:-$here/../../build/neuron}"
shift || true
log="$(mktemp)"
"$bin" serve --port 0 --queue-depth 256 >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 600); do port=$(grep -o 'listening on http://[^ ]*' "$log" | sed 's/.*://' | head -n1); [ -n "$port" ] && break; sleep 0.1; done
until curl -s "http://127.0.0.1:$port/models" | grep -q '"status":"loaded"'; do sleep 0.1; done
node "$here/http_bench.mjs" --base-url "http://127.0.0.1:$port" "$@"
