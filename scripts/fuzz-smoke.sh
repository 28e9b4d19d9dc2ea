#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each briefly (FUZZ_SECONDS, default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
CC=clang CXX=clang++ cmake -S . -B build-fuzz "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNEURON_FUZZ=ON -DNEURON_CUDA=OFF -DNEURON_TESTS=ON
targets=$(ls tests/fuzz/*.cpp 2>/dev/null | xargs -n1 basename | sed 's/\.cpp$//')
[[ -n $targets ]] || { echo "fuzz-smoke: no fuzz targets"; exit 0; }
cmake --build build-fuzz -j"$(nproc)" --target $targets
for t in $targets; do
  corpus=tests/fuzz/corpus/$t
  mkdir -p "build-fuzz/corpus-$t"
  echo "fuzz-smoke: $t for ${FUZZ_SECONDS:-30}s"
  ./build-fuzz/tests/$t -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=4096 -max_len=65536 \
    "build-fuzz/corpus-$t" $( [[ -d $corpus ]] && echo "$corpus" )
done
