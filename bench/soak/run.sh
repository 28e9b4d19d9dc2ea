#!/usr/bin/env bash
# The HTTP transport's soak (tests/integration/server_soak_test.cpp) in its
# long form: 256 concurrent clients for 10 minutes against `neuron serve`
# with the bundled tiny model, streaming and blocking requests on keep-alive
# connections, a quarter of the streams hung up at random points. Prints the
# totals; RSS and open descriptors of the daemon over time go to a CSV.
# CI runs the short form (64 clients, 30 s) as part of neuron_tests.
#   Usage: bench/soak/run.sh [CLIENTS] [SECONDS] [SAMPLES.csv]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
clients="${1:-256}"
seconds="${2:-600}"
samples="${3:-$root/bench/soak/samples-${clients}x${seconds}s.csv}"
tests="$root/build/tests/neuron_tests"
[ -x "$tests" ] || { echo "build first: cmake --build build --target neuron neuron_tests" >&2; exit 2; }
echo "soak: $clients clients for $seconds s; samples -> $samples"
NEURON_SOAK_CLIENTS="$clients" NEURON_SOAK_SECONDS="$seconds" NEURON_SOAK_SAMPLES="$samples" \
  "$tests" --gtest_filter='ServerSoak.*' 2>&1 | grep -E '^soak:|Failure|unexpected|OK \]|FAILED' 
