#!/usr/bin/env bash
# Embeddings and rerank through `neuron serve` with the openai client, the AI
# SDK and LangChain (tests/e2e/node/embeddings_test.mjs): the
# Qwen3-Embedding-shaped checkpoint of tests/data/embed as the startup model
# (detected from its sentence-transformers files), and qwen3-tiny-a loaded as
# a reranker by name.   Usage: daemon_embeddings_node.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIP: node/npm not installed (the embeddings client test needs them)"
  exit 77
fi
npm_install node

work="$(mktemp -d /tmp/neuron-e2e-embed-XXXXXX)"
data="$REPO_ROOT/tests/data/embed"
cp -r "$data/qwen3_embed-a" "$work/qwen3_embed-a"
# Its tokenizer.json is qwen3-tiny-a's with Qwen3-Embedding's post-processor (tests/data/embed/README.md).
node -e '
const fs = require("fs");
const tok = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const seq = (id, t) => ({ Sequence: { id, type_id: t } }), eos = (t) => ({ SpecialToken: { id: "<|endoftext|>", type_id: t } });
tok.post_processor = { type: "TemplateProcessing", single: [seq("A", 0), eos(0)], pair: [seq("A", 0), eos(0), seq("B", 1), eos(1)],
  special_tokens: { "<|endoftext|>": { id: "<|endoftext|>", ids: [151643], tokens: ["<|endoftext|>"] } } };
fs.writeFileSync(process.argv[2], JSON.stringify(tok));' "$TINY_MODEL/tokenizer.json" "$work/qwen3_embed-a/tokenizer.json" ||
  die "writing the embedder's tokenizer"
# A second directory of qwen3-tiny-a's files whose name says reranker.
mkdir "$work/qwen3-reranker-tiny"
for f in "$TINY_MODEL"/*; do ln -s "$f" "$work/qwen3-reranker-tiny/"; done

# The exact CPU products: the references are float32 (an embedder's default rounds activations to bf16).
start_daemon "$bin" --model "$work/qwen3_embed-a" --models-dir "$work" --cpu-activations f32
trap 'stop_daemon >/dev/null 2>&1 || true; rm -rf "$work" "$DAEMON_LOG"' EXIT
wait_loaded
curl -s "$NEURON_BASE_URL/v1/models" | grep -q '"task":"embed"' || die "/v1/models does not show the embedder's task"
rerank_id=$(realpath "$work/qwen3-reranker-tiny")
load=$(curl -s "$NEURON_BASE_URL/models/load" -d "{\"model_id\":\"$rerank_id\",\"wait\":true}")
echo "$load" | grep -q '"status":"loaded"' || die "load of the reranker: $load"
curl -s "$NEURON_BASE_URL/models" | grep -q '"task":"rerank"' || die "/models does not show the reranker's task"
NEURON_EMBED_MODEL=qwen3_embed-a NEURON_RERANK_MODEL=qwen3-reranker-tiny NEURON_EMBED_DATA="$data" \
  node "$E2E_DIR/node/embeddings_test.mjs" || die "embeddings clients"
stop_daemon
