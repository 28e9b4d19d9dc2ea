#!/usr/bin/env bash
# Packs what the TP/NCCL checks need on a GPU machine that has CUDA but none of
# neuron's other libraries: the neuron binary of a CUDA build, a gtest binary
# of tests/unit/dist_nccl_test.cpp linked against that build's neuron_lib,
# and every shared library they need except the driver's and libc's.
#   bench/tp/gpu_bundle.sh [cuda_build_dir] [out_dir]
# DIST_BUILD=<another CUDA build dir> links that build's dist/ objects ahead
# of the library (when cuda_build_dir's are stale).
# On the GPU machine: out_dir/run neuron tp-smoke --tp-size 2 --device cuda
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cuda}
out=${2:-$root/.bundle-tp}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"

obj_flags() {  # compile flags of one of the build's test objects
  awk '/^build tests\/CMakeFiles\/neuron_tests.dir\/unit\/dtype_test.cpp.o:/{f=1} f && /^ *(DEFINES|INCLUDES|FLAGS) =/{sub(/^ *[A-Z]+ = /,""); printf "%s ", $0} f && /^ *OBJECT_DIR/{exit}' "$build/build.ninja"
}
libs=$(cd "$build" && awk '/^build neuron:/{f=1} f && /LINK_LIBRARIES/{sub(/^ *LINK_LIBRARIES = /,""); print; exit}' build.ninja | sed "s| src/libneuron_lib.a| $build/src/libneuron_lib.a|")
path=$(cd "$build" && awk '/^build neuron:/{f=1} f && /LINK_PATH/{sub(/^ *LINK_PATH = /,""); print; exit}' build.ninja)
dist_objs=""
if [ -n "${DIST_BUILD:-}" ]; then
  dist_objs=$(find "$DIST_BUILD/src/CMakeFiles/neuron_lib.dir/dist" -name '*.o' | tr '\n' ' ')
fi
eval g++ $(obj_flags) -o "$stage/bin/nccl_tests" "$root/tests/unit/dist_nccl_test.cpp" $dist_objs $path $libs -lgtest -lgtest_main
cp "$build/neuron" "$stage/bin/neuron"
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -v -E 'lib(c|m|dl|rt|pthread|cuda|nvidia-.*)\.so|ld-linux' | while read -r l; do cp -Ln "$l" "$stage/lib/" 2>/dev/null || true; done
done
rm -f "$stage"/lib/libcudart* "$stage"/lib/libcublas* "$stage"/lib/libnccl*  # the GPU machine's own
tar -C "$stage" -cJf "$out/payload.tar.xz" bin lib
cat > "$out/run" <<'RUN'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
root=/tmp/tp-bundle
[ -d "$root" ] || { mkdir -p "$root" && xz -dc "$here/payload.tar.xz" | tar -C "$root" -xf -; } || exit 1
export LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
name=$1; shift
exec "$root/bin/$name" "$@"
RUN
chmod +x "$out/run"
du -sh "$out"
