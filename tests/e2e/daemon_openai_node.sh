#!/usr/bin/env bash
# The official `openai` npm client against the daemon, at tensor_parallel 1
# and 2 on the CPU; at 1 also logprobs, n > 1, CORS and the responses against
# OpenAI's schemas (api_features_test.mjs).   Usage: daemon_openai_node.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIP: node/npm not installed (the openai client test needs them)"
  exit 77
fi
npm_install node

# The tensor-parallel copy needs its own id that survives URL normalisation
# (models.retrieve puts the id in the path): a link to the same files.
links="$(mktemp -d /tmp/neuron-e2e-models-XXXXXX)"
# A second directory of the same files (linked): one directory is one model however
# spelled, so a symlink to the first would be the same model (409).
mkdir "$links/qwen3-tiny-tp2"
for f in "$TINY_MODEL"/*; do ln -s "$f" "$links/qwen3-tiny-tp2/"; done
start_daemon "$bin" --model "$TINY_MODEL" --models-dir "$links" --allowed-origins http://app.example
trap 'stop_daemon >/dev/null 2>&1 || true; rm -rf "$links" "$DAEMON_LOG"' EXIT
wait_loaded
NEURON_MODEL="$TINY_MODEL" node "$E2E_DIR/node/openai_client_test.mjs" || die "openai client at tensor_parallel 1"
# A model whose greedy answer is a tool call, for the streamed tool call deltas.
node "$E2E_DIR/node/make_tool_call_model.mjs" "$TINY_MODEL" "$links/qwen3-tool-call" || die "writing the tool call model"
tool_id=$(realpath "$links/qwen3-tool-call")
load=$(curl -s "$NEURON_BASE_URL/models/load" -d "{\"model_id\":\"$tool_id\",\"wait\":true}")
echo "$load" | grep -q '"status":"loaded"' || die "load of the tool call model: $load"
NEURON_MODEL="$TINY_MODEL" NEURON_TOOL_MODEL="$tool_id" node "$E2E_DIR/node/api_features_test.mjs" || die "logprobs, n, tool calls, CORS and the OpenAI schemas"
curl -s "$NEURON_BASE_URL/models/unload" -d "{\"model_id\":\"$tool_id\"}" | grep -q unloaded || die "unload of the tool call model"

tp_id=$(realpath "$links/qwen3-tiny-tp2")
load=$(curl -s "$NEURON_BASE_URL/models/load" -d "{\"model_id\":\"$tp_id\",\"tensor_parallel\":2,\"wait\":true}")
echo "$load" | grep -q '"status":"loaded"' || die "load at tensor_parallel 2: $load"
echo "$load" | grep -q '"tensor_parallel":2' || die "tensor_parallel 2 not reported: $load"
NEURON_MODEL="$tp_id" node "$E2E_DIR/node/openai_client_test.mjs" || die "openai client at tensor_parallel 2"
stop_daemon
