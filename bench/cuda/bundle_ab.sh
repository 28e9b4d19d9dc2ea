#!/usr/bin/env bash
# bundle_ab.sh DEST BASE_NEURON BINARY...
# A device bundle (../shared/tools/device-bundle) of BINARY... with BASE_NEURON beside them as
# bin/neuron-base (`DEST/run neuron-base ...`), for before/after timings in one call. The two neuron
# binaries sit next to each other in one xz stream with a 64 MiB dictionary, so the second costs
# ~1 MB instead of ~17 (a bundle with cuda_tests and both: 18 MB; a call carries 64 MiB in all).
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: bundle_ab.sh DEST BASE_NEURON BINARY..." >&2; exit 2; }
dest=$1 base=$2; shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
"$root/../shared/tools/device-bundle" "$dest" "$@" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
xz -dc "$dest/payload.tar.xz" | tar -C "$stage" -xf -
cp -L "$base" "$stage/bin/neuron-base"
(cd "$stage" && tar -cf - bin/neuron bin/neuron-base $(cd "$stage" && ls bin | grep -v -x -e neuron -e neuron-base | sed 's|^|bin/|') lib) |
  xz -T2 -9e >"$dest/payload.tar.xz"
sum=$(sha256sum "$dest/payload.tar.xz" | cut -c1-16)
sed -i -E "s|/tmp/device-bundle-[0-9a-f]+|/tmp/device-bundle-$sum|" "$dest/run"
du -sh "$dest/payload.tar.xz" | awk '{print "bundle_ab: " $1 " compressed, " $2}'
