#!/usr/bin/env bash
# Builds neuron and runs every test (CTest: unit, golden, TP, daemon end to end).
# With CI=true it also runs the ASan+UBSan build of the tests and the fuzzers briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900)
if [[ ${CI:-} == true ]]; then
  bash scripts/test-sanitizers.sh
  FUZZ_BUILD=build-asan bash scripts/fuzz-smoke.sh
fi
