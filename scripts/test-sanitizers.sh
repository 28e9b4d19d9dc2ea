#!/usr/bin/env bash
# ASan + UBSan build of the tests (CPU only: the sanitizers do not see CUDA
# kernels), with clang, which also builds the libFuzzer targets in the same
# tree so scripts/fuzz-smoke.sh (FUZZ_BUILD=build-asan) runs them without a
# second build of the library.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# A tree configured with another compiler (gcc, before) is started afresh.
if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
# Line tables only: the sanitizers' reports still name file and line, and the build (2 cores in CI) is
# about a fifth faster than with full debug information (server/api.cpp: 35.7 s -> 29.2 s, clang 14).
CC=clang CXX=clang++ cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEURON_SANITIZE=ON \
  -DNEURON_FUZZ=ON -DNEURON_CUDA=OFF -DNEURON_TESTS=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG"
t0=$SECONDS
cmake --build build-asan -j"$(nproc)"
echo "test-sanitizers.sh: build $((SECONDS - t0)) s"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
bash scripts/seed-ctest-costs.sh build-asan
t0=$SECONDS
(cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 1800 -LE no-sanitize)
echo "test-sanitizers.sh: ctest $((SECONDS - t0)) s"
