#!/usr/bin/env bash
# Builds bench/tp/tp_bench against a CPU build of neuron_lib (default build-tp).
#   bench/tp/build.sh [build_dir] [output]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-tp}
out=${2:-$build/tp_bench}
# Compile flags of a library source and the neuron binary's link line, from the build's ninja file.
flags=$(cd "$build" && awk '/^build src\/CMakeFiles\/neuron_lib.dir\/tp\/tp_runner.cpp.o:/{f=1} f && /^ *(DEFINES|INCLUDES|FLAGS) =/{sub(/^ *[A-Z]+ = /,""); printf "%s ", $0} f && /^ *OBJECT_DIR/{exit}' build.ninja)
libs=$(cd "$build" && awk '/^build neuron:/{f=1} f && /LINK_LIBRARIES/{sub(/^ *LINK_LIBRARIES = /,""); print; exit}' build.ninja | sed "s| src/libneuron_lib.a| $build/src/libneuron_lib.a|")
path=$(cd "$build" && awk '/^build neuron:/{f=1} f && /LINK_PATH/{sub(/^ *LINK_PATH = /,""); print; exit}' build.ninja)
eval g++ $flags -std=c++20 -O2 -fopenmp -o "$out" "$root/bench/tp/tp_bench.cpp" $path $libs
echo "built $out"
