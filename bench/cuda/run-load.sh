#!/usr/bin/env bash
# Issue 26's load target: Qwen3-30B-A3B (random bf16 weights of the real shape, `neuron
# gen-model --preset qwen3-30b-a3b`, 61 GB in 16 safetensors shards) from the page cache
# (/dev/shm, so the pages are resident) to a ready CUDA runner, `neuron generate`'s load_ms;
# BASE (the binary before a change, optional) and neuron alternate. Needs ~70 GB of host memory.
#   bash bench/cuda/run-load.sh [BASE]   (carry .bundle; results appended to $OUT/r/load.jsonl)
set -uo pipefail
R=$OUT/r; mkdir -p $R
base=${1:-}
m=/dev/shm/q30b
t=$SECONDS
timeout 240 .bundle/run neuron gen-model --preset qwen3-30b-a3b --shards 16 --out $m >$R/load.log 2>&1
echo "gen-model rc=$? in $((SECONDS - t)) s, $(du -sh $m | cut -f1)" >>$R/load.log
one() {  # $1 label, $2 binary
  local t0=$SECONDS
  timeout 120 .bundle/run $2 generate --model $m --device cuda:0 --prompt-ids 1,2,3,4 --max-tokens 4 --json \
    >$R/gen.out 2>>$R/load.log
  echo "{\"label\": \"$1\", \"rc\": $?, \"wall_s\": $((SECONDS - t0)), \"out\": $(tail -1 $R/gen.out | grep '^{' || echo null)}" >>$R/load.jsonl
}
for round in 1 2; do
  [ -n "$base" ] && one "base r$round" "$base"
  one "new r$round" neuron
done
rm -rf $m
