#!/usr/bin/env bash
# The Responses API through the official `openai` npm client and the Messages
# API through `@anthropic-ai/sdk`, against the daemon on the CPU, with an API
# key (Bearer for OpenAI, x-api-key for Anthropic).   Usage: daemon_responses_node.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIP: node/npm not installed (the client tests need them)"
  exit 77
fi
npm_install node

export NEURON_API_KEY="e2e-$RANDOM$RANDOM"
start_daemon "$bin" --model "$TINY_MODEL"
wait_loaded
NEURON_MODEL="$TINY_MODEL" node "$E2E_DIR/node/responses_messages_test.mjs" || die "responses / messages clients"
stop_daemon
