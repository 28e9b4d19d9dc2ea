#!/usr/bin/env bash
# Links the GPU tests alone (cuda_*_test.cpp, dist_nccl_test.cpp + neuron_lib) into
# $build/cuda_tests, so a GPU run does not wait on unrelated test files; with
# cpu_exact_default.cpp, so their CPU references are f32 as in neuron_tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
cd "$build"
objs=()
for f in "$root"/tests/unit/cuda_*_test.cpp "$root"/tests/unit/dist_nccl_test.cpp "$root"/tests/unit/cpu_exact_default.cpp; do
  o=tests/CMakeFiles/neuron_tests.dir/unit/$(basename "$f").o
  ninja -j2 "$o" >/dev/null
  objs+=("$o")
done
libs=$(awk '/^build tests\/neuron_tests /{f=1} f && /LINK_LIBRARIES/{sub(/^ *LINK_LIBRARIES = /,""); print; exit}' build.ninja)
path=$(awk '/^build tests\/neuron_tests /{f=1} f && /LINK_PATH/{sub(/^ *LINK_PATH = /,""); print; exit}' build.ninja)
eval g++ -fopenmp -o cuda_tests "${objs[@]}" $path $libs
echo "built $build/cuda_tests"
