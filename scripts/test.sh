#!/usr/bin/env bash
# Builds neuron and runs every test (CTest: unit, golden, TP, daemon end to end).
# With CI=true it also runs the ASan+UBSan build of the tests and the fuzzers briefly.
# Each stage's seconds are printed at the end, passed or failed (CI keeps the whole run under 50 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
stages=()
stage() {
  local name=$1 t0=$SECONDS
  shift
  "$@"
  stages+=("$name $((SECONDS - t0)) s")
}
report() { ((${#stages[@]})) && printf 'test.sh: %s\n' "${stages[@]}"; }
trap report EXIT
stage build bash scripts/build.sh
bash scripts/seed-ctest-costs.sh build
stage ctest bash -c 'cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900'
if [[ ${CI:-} == true ]]; then
  stage sanitizers bash scripts/test-sanitizers.sh
  # 15 s a target keeps CI (2 cores, all stages) under 50 minutes; fuzz-smoke.sh alone defaults to 30.
  stage fuzz env FUZZ_BUILD=build-asan FUZZ_SECONDS="${FUZZ_SECONDS:-15}" bash scripts/fuzz-smoke.sh
fi
