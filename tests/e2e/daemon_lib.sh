# Shared by the e2e scripts: start `neuron serve` on a free loopback port in
# its own session, wait for it, and stop it (SIGTERM, exit status 0, no
# process of its session left behind). Source it; call start_daemon BIN ARGS...
set -u

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$E2E_DIR/../.." && pwd)"
TINY_MODEL="$REPO_ROOT/models/qwen3-tiny-a"
DAEMON_PID=""
DAEMON_LOG="$(mktemp /tmp/neuron-e2e-XXXXXX.log)"

die() { echo "FAIL $*"; [ -f "$DAEMON_LOG" ] && { echo "--- daemon log (tail)"; tail -n 40 "$DAEMON_LOG"; }; exit 1; }

# npm ci in $E2E_DIR/$1 when its lock file changed since the last install there (npm ci rebuilds
# node_modules each time). The tests sharing a folder hold one CTest RESOURCE_LOCK (daemon.cmake).
npm_install() {
  local dir="$E2E_DIR/$1"
  cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed-lock.json" && return 0
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json) ||
    die "npm ci in $1 (is the npm registry reachable?)"
}

start_daemon() {
  local bin="$1"; shift
  setsid "$bin" serve --port 0 "$@" >"$DAEMON_LOG" 2>&1 &
  DAEMON_PID=$!
  trap 'stop_daemon >/dev/null 2>&1 || true; rm -f "$DAEMON_LOG"' EXIT
  local i
  for i in $(seq 1 600); do
    NEURON_PORT=$(grep -o 'listening on http://[^ ]*' "$DAEMON_LOG" | head -n1 | sed 's/.*://')
    [ -n "$NEURON_PORT" ] && break
    kill -0 "$DAEMON_PID" 2>/dev/null || die "daemon exited at startup"
    sleep 0.1
  done
  [ -n "$NEURON_PORT" ] || die "daemon did not start listening"
  NEURON_BASE_URL="http://127.0.0.1:$NEURON_PORT"
  export NEURON_PORT NEURON_BASE_URL
}

# Waits until every model is loaded (fails on a failed load); sends $NEURON_API_KEY when set.
wait_loaded() {
  local i body health
  for i in $(seq 1 1200); do
    body=$(curl -s ${NEURON_API_KEY:+-H "Authorization: Bearer $NEURON_API_KEY"} "$NEURON_BASE_URL/models" || true)
    # A failed first load leaves /models; /health's activation keeps what failed at startup.
    health=$(curl -s "$NEURON_BASE_URL/health" || true)
    case "$health" in *'"failed":[{'*) die "a model failed to load: $health" ;; esac
    case "$body" in
      *'"state":"failed"'*) die "a model failed to load: $body" ;;
      *'"status":"loaded"'*) case "$body" in *'"status":"loading"'*) ;; *) return 0 ;; esac ;;
    esac
    sleep 0.1
  done
  die "models did not load: $body"
}

# SIGTERM, wait for exit 0, and check nothing of the daemon's session survives (TP workers included).
stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  local pid="$DAEMON_PID" status i
  DAEMON_PID=""
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null; die "daemon ignored SIGTERM for 30 s"; fi
  wait "$pid"; status=$?
  [ "$status" = 0 ] || die "daemon exited with status $status after SIGTERM"
  if pgrep -s "$pid" >/dev/null 2>&1; then
    pgrep -a -s "$pid"; pkill -KILL -s "$pid"; die "processes of the daemon's session survived shutdown"
  fi
  echo "PASS daemon stopped cleanly (exit 0, no stray processes)"
}
