#!/usr/bin/env bash
# ASan + UBSan build of the tests (CPU only: the sanitizers do not see CUDA kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEURON_SANITIZE=ON -DNEURON_CUDA=OFF
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 1800 -LE no-sanitize)
