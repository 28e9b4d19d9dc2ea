#!/usr/bin/env bash
# Builds neuron and starts the daemon on 127.0.0.1:13131 serving the bundled
# tiny model (models/qwen3-tiny-a). Extra arguments go to `neuron serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/neuron serve "$@"
