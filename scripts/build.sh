#!/usr/bin/env bash
# Configures and builds neuron into build/ (build/neuron is the binary).
# Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
cmake --build build -j"$(nproc)"
