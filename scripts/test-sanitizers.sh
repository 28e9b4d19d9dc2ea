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
CC=clang CXX=clang++ cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEURON_SANITIZE=ON \
  -DNEURON_FUZZ=ON -DNEURON_CUDA=OFF -DNEURON_TESTS=ON
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 1800 -LE no-sanitize)
