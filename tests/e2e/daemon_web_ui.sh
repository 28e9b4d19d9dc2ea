#!/usr/bin/env bash
# The built-in web UI in a real browser: Debian's chromium driven by
# puppeteer-core (browser/web_ui_test.mjs) against a daemon with --api-key.
# Screenshots: BUILD/test-artifacts/web-ui/*.png.   Usage: daemon_web_ui.sh BUILD/neuron
# Skips (77) where chromium or node/npm is missing; scripts/install-deps.sh installs them.
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

chromium_bin=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chromium_bin" ]; then echo "SKIP: chromium not installed (apt-get install chromium)"; exit 77; fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then echo "SKIP: node/npm not installed"; exit 77; fi
npm_install browser

shots="$(cd "$(dirname "$bin")" && pwd)/test-artifacts/web-ui"
rm -rf "$shots"
models="$(mktemp -d /tmp/neuron-e2e-webui-XXXXXX)"
key="web-ui-$RANDOM$RANDOM"

# A model whose greedy answer is hostile: reasoning, Markdown, an <img onerror> and a <script>.
# (Every token of it appears once: the scripted model is a bigram chain.)
answer='<think>Plan</think>**Hi**, <img src=x onerror=alert(1)><script>pwn()</SCRIPT>'
ids=$("$bin" tokenize --model "$TINY_MODEL" --text "$answer" --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.stringify(JSON.parse(s).tokens)))') ||
  die "tokenizing the scripted answer"
node "$E2E_DIR/node/make_tool_call_model.mjs" "$TINY_MODEL" "$models/scripted" "$ids" || die "writing the scripted model"
node "$E2E_DIR/node/make_tool_call_model.mjs" "$TINY_MODEL" "$models/tool-caller" || die "writing the tool call model"

start_daemon "$bin" --model "$TINY_MODEL" --models-dir "$models" --api-key "$key"
trap 'stop_daemon >/dev/null 2>&1 || true; rm -rf "$models" "$DAEMON_LOG"' EXIT
NEURON_API_KEY="$key" wait_loaded
NEURON_API_KEY="$key" CHROMIUM="$chromium_bin" SCREENSHOT_DIR="$shots" \
  SCRIPTED_MODEL="$(realpath "$models/scripted")" TOOL_MODEL="$(realpath "$models/tool-caller")" \
  node "$E2E_DIR/browser/web_ui_test.mjs" || die "the web UI in chromium (screenshots in $shots)"
echo "screenshots: $shots"
stop_daemon
