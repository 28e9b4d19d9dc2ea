#!/usr/bin/env bash
# A short device call: the MoE kernels' GPU tests, then Qwen3-30B-A3B decode (dummy bf16 weights, prompt 128,
# 128 tokens) at batch 1 and 4 with `neuron-base` and `neuron` alternating, two rounds (bundle_ab.sh's bundle).
#   run: bash bench/cuda/run-moe-ab.sh   (carry .bundle; results come back as $OUT/r.tgz)
set -uo pipefail
O=$OUT R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>$R/steps.log
timeout 60 .bundle/run cuda_tests --gtest_filter='CudaMoe*:CudaFamily.Qwen3Moe*' >$R/tests.log 2>&1
echo "cuda_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | tr '\n' ' ')" >>$R/steps.log
M="bench --dummy-weights --device cuda:0 --json --config qwen3-30b-a3b --prompt-len 128 --gen 128"
for round in 1 2; do
  for b in neuron-base neuron; do
    for batch in 1 4; do
      timeout 40 .bundle/run $b $M --batch $batch >>$R/moe-$b.jsonl 2>>$R/bench.err
      echo "round $round $b batch $batch rc=$? $(tail -1 $R/moe-$b.jsonl | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print([round(r["decode_tok_s"],1) for r in d["runs"]])')" >>$R/steps.log
    done
  done
done
cat $R/steps.log
tar -C $O -czf $O/r.tgz r && rm -rf $R
