#!/usr/bin/env bash
# scripts/validate-neuron.sh against a live daemon, for tensor_parallel 1 and
# 2 on the CPU.   Usage: daemon_validate.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

# A second directory of the same files (linked), so loading it is a second model;
# another spelling of the first directory would be the same one (409).
copies="$(mktemp -d /tmp/neuron-e2e-validate-XXXXXX)"
mkdir "$copies/tiny-copy"
for f in "$TINY_MODEL"/*; do ln -s "$f" "$copies/tiny-copy/"; done
copy="$(realpath "$copies/tiny-copy")"
start_daemon "$bin" --model "$TINY_MODEL" --models-dir "$copies"
trap 'stop_daemon >/dev/null 2>&1 || true; rm -rf "$copies" "$DAEMON_LOG"' EXIT
wait_loaded
# Already loaded at tp 1: validated in place and left loaded.
"$REPO_ROOT/scripts/validate-neuron.sh" --base-url "$NEURON_BASE_URL" --model "$TINY_MODEL" --tp-size 1 || die "validate tp 1 (preloaded)"
# The copy: loaded, checked and unloaded by the script.
for tp in 1 2; do
  "$REPO_ROOT/scripts/validate-neuron.sh" --base-url "$NEURON_BASE_URL" --model "$copy" --tp-size "$tp" || die "validate tp $tp"
done
# Positional form (host model quant tp).
"$REPO_ROOT/scripts/validate-neuron.sh" "127.0.0.1:$NEURON_PORT" "$copy" "" 2 || die "validate positional tp 2"
# A failing check must fail the script.
if "$REPO_ROOT/scripts/validate-neuron.sh" --base-url "$NEURON_BASE_URL" --model "$copy" --tp-size 3 >/dev/null; then
  die "validate passed for tensor_parallel 3, which the model cannot split"
fi
echo "PASS validate-neuron.sh fails on a bad load"
stop_daemon
