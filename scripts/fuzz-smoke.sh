#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each briefly (FUZZ_SECONDS, default 30).
# FUZZ_BUILD names the build tree (default build-fuzz); scripts/test-sanitizers.sh's
# build-asan already holds the targets, and CI runs them from there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${FUZZ_BUILD:-build-fuzz}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if ! grep -q '^NEURON_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DNEURON_FUZZ=ON -DNEURON_CUDA=OFF -DNEURON_TESTS=ON
fi
targets=$(ls tests/fuzz/*.cpp 2>/dev/null | xargs -n1 basename | sed 's/\.cpp$//')
[[ -n $targets ]] || { echo "fuzz-smoke: no fuzz targets"; exit 0; }
cmake --build "$build" -j"$(nproc)" --target $targets
# The targets run side by side, one a core, each into its own log (printed when it fails).
fuzz_one() {
  local t=$1 corpus=tests/fuzz/corpus/$1
  mkdir -p "$build/corpus-$t"
  "./$build/tests/$t" -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=4096 -max_len=65536 \
    "$build/corpus-$t" $( [[ -d $corpus ]] && echo "$corpus" ) >"$build/fuzz-$t.log" 2>&1
}
failed=()
pending=($targets)
while ((${#pending[@]})); do
  batch=("${pending[@]:0:$(nproc)}")
  pending=("${pending[@]:${#batch[@]}}")
  pids=()
  for t in "${batch[@]}"; do
    echo "fuzz-smoke: $t for ${FUZZ_SECONDS:-30}s"
    fuzz_one "$t" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    if ! wait "${pids[$i]}"; then
      failed+=("${batch[$i]}")
      tail -n 60 "$build/fuzz-${batch[$i]}.log"
    fi
  done
done
if ((${#failed[@]})); then
  echo "fuzz-smoke: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz-smoke: every target ran ${FUZZ_SECONDS:-30}s without a finding"
