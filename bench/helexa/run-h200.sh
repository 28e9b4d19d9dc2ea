#!/usr/bin/env bash
# The helexa contract on the GPU machine: a daemon serving the bundled model on
# cuda:0, then at tensor_parallel 2 sharing cuda:0 (the host-staged Gloo path;
# one GPU is lent), checked by contract_check.py. Bundle at .bundle
# (device-bundle .bundle build/neuron). Output: $OUT/contract.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.helexa-out}
mkdir -p "$OUT"
port=18431
HF_HUB_OFFLINE=1 .bundle/run neuron serve --port $port --models-dir "$root/models" >"$OUT/server.log" 2>&1 &
pid=$!
for _ in $(seq 120); do curl -s "localhost:$port/health" >/dev/null && break; sleep 0.5; done
python3 bench/helexa/contract_check.py "http://127.0.0.1:$port" "$root/models/qwen3-tiny-a" --device cuda:0 \
  --tp2-devices 0,0 >"$OUT/contract.log" 2>&1
echo "contract_check rc=$?" >>"$OUT/contract.log"
kill $pid; wait $pid
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$OUT/contract.log" 2>&1
