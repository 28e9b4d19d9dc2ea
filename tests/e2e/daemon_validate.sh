#!/usr/bin/env bash
# scripts/validate-neuron.sh against a live daemon, for tensor_parallel 1 and
# 2 on the CPU.   Usage: daemon_validate.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

start_daemon "$bin" --model "$TINY_MODEL"
wait_loaded
# Already loaded at tp 1: validated in place and left loaded.
"$REPO_ROOT/scripts/validate-neuron.sh" --base-url "$NEURON_BASE_URL" --model "$TINY_MODEL" --tp-size 1 || die "validate tp 1 (preloaded)"
# A second id for the same files: loaded, checked and unloaded by the script.
for tp in 1 2; do
  "$REPO_ROOT/scripts/validate-neuron.sh" --base-url "$NEURON_BASE_URL" --model "$TINY_MODEL/." --tp-size "$tp" || die "validate tp $tp"
done
# Positional form (host model quant tp).
"$REPO_ROOT/scripts/validate-neuron.sh" "127.0.0.1:$NEURON_PORT" "$TINY_MODEL/." "" 2 || die "validate positional tp 2"
# A failing check must fail the script.
if "$REPO_ROOT/scripts/validate-neuron.sh" --base-url "$NEURON_BASE_URL" --model "$TINY_MODEL/." --tp-size 3 >/dev/null; then
  die "validate passed for tensor_parallel 3, which the model cannot split"
fi
echo "PASS validate-neuron.sh fails on a bad load"
stop_daemon
