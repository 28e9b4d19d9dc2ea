#!/usr/bin/env bash
# Puts llama.cpp's source into the repo's ignored .llama/ folder for
# run-h200.sh / run-cpu.sh, from the npm package node-llama-cpp (which ships
# llama.cpp as the git bundle llama/gitRelease.bundle):
#   bash bench/serve/prepare-llama.sh [VERSION]     (default 3.22.1)
# Writes .llama/llama-src.tar.xz (about 6.5 MB: the tree without models/,
# docs/, tests/, examples/ and the non-CPU/CUDA backends, small enough to
# carry to the GPU machine) and .llama/llama-src.txt (version and commit).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=${1:-3.22.1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$root/.llama"
(cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
tar -xzf "$tmp/node-llama-cpp-$version.tgz" -C "$tmp" package/llama/gitRelease.bundle
git clone -q "$tmp/package/llama/gitRelease.bundle" "$tmp/src" 2>/dev/null
commit=$(git -C "$tmp/src" rev-parse HEAD)
exclude=()
for p in models docs media benches tests examples ggml/src/ggml-et ggml/src/ggml-metal ggml/src/ggml-hexagon \
  ggml/src/ggml-sycl ggml/src/ggml-vulkan ggml/src/ggml-opencl ggml/src/ggml-cann ggml/src/ggml-musa \
  ggml/src/ggml-webgpu ggml/src/ggml-zdnn ggml/src/ggml-zendnn ggml/src/ggml-openvino; do
  exclude+=(":!$p")
done
git -C "$tmp/src" archive --format=tar --prefix=llama.cpp/ HEAD -- . "${exclude[@]}" | xz -T0 -9 >"$root/.llama/llama-src.tar.xz"
printf 'node-llama-cpp %s\nllama.cpp commit %s\n' "$version" "$commit" >"$root/.llama/llama-src.txt"
echo "wrote $root/.llama/llama-src.tar.xz ($(du -h "$root/.llama/llama-src.tar.xz" | cut -f1)), llama.cpp commit $commit"
