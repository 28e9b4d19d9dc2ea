#!/usr/bin/env bash
# Constrained decoding end to end: ajv, the openai client, the AI SDK and
# LangChain JS against the daemon serving the bundled random-weight model
# (tests/e2e/node/structured_output_test.mjs).   Usage: daemon_structured_output.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIP: node/npm not installed (the structured output test needs them)"
  exit 77
fi
npm_install node
start_daemon "$bin" --model "$TINY_MODEL"
wait_loaded
NEURON_MODEL="$TINY_MODEL" node "$E2E_DIR/node/structured_output_test.mjs" || die "structured output checks"
stop_daemon
