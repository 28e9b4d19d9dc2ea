#!/usr/bin/env bash
# Builds bench/cuda/cuda_bench against a CUDA build of neuron_lib (default build-cuda).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
out=${2:-$build/cuda_bench}
flags=$(python3 - "$build" "$root" <<'PY'
import json, shlex, sys
build, root = sys.argv[1], sys.argv[2]
for e in json.load(open(f"{build}/compile_commands.json")):
    if e["file"].endswith("backend/cuda/cuda_runner.cpp"):
        args = shlex.split(e["command"])
        keep = [a for a in args[1:] if a.startswith(("-I", "-D", "-isystem", "-std", "-O", "-f")) or a == "-isystem"]
        # -isystem takes the next argument
        out, i = [], 1
        while i < len(args):
            a = args[i]
            if a == "-isystem": out += [a, args[i + 1]]; i += 2; continue
            if a.startswith(("-I", "-D", "-std", "-O", "-fopenmp")): out.append(a)
            i += 1
        print(" ".join(shlex.quote(a) for a in out))
PY
)
# The neuron binary's link line, from the build's ninja file.
libs=$(cd "$build" && awk '/^build neuron:/{f=1} f && /LINK_LIBRARIES/{sub(/^ *LINK_LIBRARIES = /,""); print; exit}' build.ninja | sed "s| src/libneuron_lib.a| $build/src/libneuron_lib.a|")
path=$(cd "$build" && awk '/^build neuron:/{f=1} f && /LINK_PATH/{sub(/^ *LINK_PATH = /,""); print; exit}' build.ninja)
eval g++ $flags -o "$out" "$root/bench/cuda/cuda_bench.cpp" $path $libs
echo "built $out"
