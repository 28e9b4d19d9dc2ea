#!/usr/bin/env bash
# Builds neuron and runs every test (CTest: unit, golden, TP, daemon end to end).
# With CI=true it also runs the ASan+UBSan build of the tests and the fuzzers briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/seed-ctest-costs.sh build
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900)
if [[ ${CI:-} == true ]]; then
  bash scripts/test-sanitizers.sh
  # 15 s a target keeps CI (2 cores, all stages) under 50 minutes; fuzz-smoke.sh alone defaults to 30.
  FUZZ_BUILD=build-asan FUZZ_SECONDS=${FUZZ_SECONDS:-15} bash scripts/fuzz-smoke.sh
fi
