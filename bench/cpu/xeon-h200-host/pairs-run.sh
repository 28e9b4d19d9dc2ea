#!/usr/bin/env bash
# The bf16-pair decode kernels on the H200 machine host CPU (an Intel Xeon):
# cpu_kernel_bench, and neuron bench q4_k / q6_k decode with the f32 kernels
# forced (NEURON_CPU_ISA=avx512) against the measured choice and int8
# activations (NEURON_CPU_ACTIVATIONS=int8), 2 and 16
# threads. One device call, from the repository root after
#   ninja -C build neuron cpu_kernel_bench (with -DNEURON_BENCH=ON)
#   /work/shared/tools/device-bundle .bundle build/neuron build/bench/cpu_kernel_bench
# Results go to $OUT (the device run folder).
set -x
lscpu | grep -E "Model name|^CPU\(s\)|L3|Flags" | cut -c1-300
.bundle/run cpu_kernel_bench --benchmark_min_time=0.3 > $OUT/kernel-bench.txt 2>&1
for t in 2 16; do for isa in avx512 auto int8; do for q in q4_k q6_k; do
  case $isa in auto) e="";; int8) e="NEURON_CPU_ACTIVATIONS=int8";; *) e="NEURON_CPU_ISA=avx512";; esac
  env OMP_NUM_THREADS=$t $e .bundle/run neuron bench --config qwen3-0.6b --dummy-weights --prompt-len 16 --gen 64 --quant $q --json 2>$OUT/log-$t-$isa-$q.txt | tee -a $OUT/bench.jsonl | python3 -c "import json,sys; d=json.load(sys.stdin); print('threads $t $isa $q', d['runs'][0]['decode_tok_s'], d.get('decode_kernels'))"
done; done; done
grep -h "decode kernels" $OUT/log-*.txt | sort -u | cut -c1-300
