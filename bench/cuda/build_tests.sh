#!/usr/bin/env bash
# Links the GPU tests alone (cuda_*_test.cpp, dist_nccl_test.cpp + neuron_lib) into
# $build/cuda_tests, so a GPU run does not wait on unrelated test files; with
# cpu_exact_default.cpp, so their CPU references are f32 as in neuron_tests.
# neuron_tests builds in unity batches, so each file compiles here on its own with
# neuron_tests' flags (from compile_commands.json), into $build/cuda_tests.objs/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
cd "$build"
ninja -j2 src/libneuron_lib.a >/dev/null
cmd=$(python3 - <<'PY'
import json
for e in json.load(open("compile_commands.json")):
    if "neuron_tests.dir" in e.get("output", e["command"]):
        print(e["command"]); break
PY
)
[[ -n $cmd ]] || { echo "build_tests: no neuron_tests entry in compile_commands.json" >&2; exit 1; }
# The flags without the compiler, the unity source and its output.
flags=$(sed -E 's/^[^ ]+ //; s/ -o [^ ]+//; s/ -c [^ ]+//' <<<"$cmd")
compiler=${cmd%% *}
mkdir -p cuda_tests.objs
objs=()
for f in "$root"/tests/unit/cuda_*_test.cpp "$root"/tests/unit/dist_nccl_test.cpp "$root"/tests/unit/cpu_exact_default.cpp; do
  o=cuda_tests.objs/$(basename "$f").o
  objs+=("$o")
  eval "$compiler $flags -c $f -o $o" &  # every time: a header the file includes may have changed
  (($(jobs -r | wc -l) < 2)) || wait -n
done
wait
libs=$(awk '/^build tests\/neuron_tests /{f=1} f && /LINK_LIBRARIES/{sub(/^ *LINK_LIBRARIES = /,""); print; exit}' build.ninja)
path=$(awk '/^build tests\/neuron_tests /{f=1} f && /LINK_PATH/{sub(/^ *LINK_PATH = /,""); print; exit}' build.ninja)
eval g++ -fopenmp -o cuda_tests "${objs[@]}" $path $libs
echo "built $build/cuda_tests"
