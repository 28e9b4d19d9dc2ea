# Shared by the device-call scripts run-27b.sh and run-30b.sh (sourced from the repository root on the GPU
# machine): results under $OUT/r (packed into $OUT/r.tgz by pack_results: a call returns only a few files),
# scratch in /dev/shm/work, bench/serve/lib.sh's servers and bench-serve, a step log with seconds, and
# llama.cpp (.convert/llama-src.tar.xz, node-llama-cpp's source under llama.cpp/) built for CUDA in the
# background.
root=$PWD; O=$OUT R=$OUT/r; mkdir -p $R
export OUT=$R WORK=/dev/shm/work NEURON="$root/.bundle/run neuron" READY_TIMEOUT=${READY_TIMEOUT:-150}  # a load that fails leaves the daemon up, unready
mkdir -p $WORK /work && { [ -e /work/main ] || ln -s $root /work/main; }  # tests find fixtures by /work/main
source bench/serve/lib.sh
t0=$(date +%s)
say() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $R/steps.log; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>$R/steps.log

# build_llama_cuda TARGET...: configures and builds llama.cpp's TARGETs in /tmp/llama/b (nice 19, 13 jobs) in the
# background; sets build (its pid), binaries in /tmp/llama/b/bin, "build rc=N" last in /tmp/llama-build.log.
build_llama_cuda() {
  ( mkdir -p /tmp/llama && cd /tmp/llama && tar xJf $root/.convert/llama-src.tar.xz &&
    cmake -S llama.cpp -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
      -DGGML_CUDA_NCCL=OFF -DCMAKE_BUILD_TYPE=Release >$R/llama-cfg.log 2>&1 &&
    nice -n 19 cmake --build b -j13 --target "$@" >/tmp/llama-build.log 2>&1; echo "build rc=$?" >>/tmp/llama-build.log ) &
  build=$!
}

# run_watched FUNCTION: runs it in the background until it returns or LIMIT seconds (570) pass, stops what is
# left (servers, neuron, llama.cpp), drops the scratch and packs the results.
run_watched() {
  "$1" &
  local m=$! i
  for i in $(seq ${LIMIT:-570}); do kill -0 $m 2>/dev/null || break; sleep 1; done
  kill $m 2>/dev/null; pkill -P $m
  stop_servers; pkill -f llama-server; pkill -f "bin/neuron"
  cp /tmp/llama-build.log $R/ 2>/dev/null; rm -rf $WORK
  cat $R/steps.log
  tar -C $O -czf $O/r.tgz r && rm -rf $R
}

# bench_table: every run in $R/bench-*.jsonl and $R/moe-*.jsonl (`neuron bench --json` lines), one line each, into
# steps.log.
bench_table() {
python3 - $R >>$R/steps.log <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/bench-*.jsonl") + glob.glob(sys.argv[1] + "/moe-*.jsonl")):
    for line in open(f):
        try: d = json.loads(line)
        except ValueError: continue
        for r in d.get("runs", []):
            print(f.split("/")[-1], d.get("config"), "batch", d.get("batch"), "prompt", r["prompt_len"],
                  "prefill_ms %.1f" % r["prefill_ms"], "decode_tok_s %.1f" % r["decode_tok_s"])
PY
}

# ids N SEED: N random token ids (ordinary Qwen3 tokens), comma-separated.
ids() { python3 -c "import random; r=random.Random($2); print(','.join(str(r.randrange(1000,150000)) for _ in range($1)))"; }

# neuron_gen LABEL FILE PROMPT GEN: `neuron generate` twice over PROMPT random ids then GEN tokens on the GPU;
# its timings (prefill, decode, load_ms) as one line {"label", ...} in neuron-gen.jsonl.
neuron_gen() {
  local line
  line=$(timeout 120 .bundle/run neuron generate --model $2 --device cuda:0 --prompt-ids $(ids $3 5) --max-tokens $(($4 + 1)) \
    --ignore-eos --temperature 0 --repeat 2 --json 2>$R/gen-$1.err | tail -1 |
    python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'label': '$1', **d['timings']}))" 2>/dev/null)
  if [ -n "$line" ]; then echo "$line" >>$R/neuron-gen.jsonl; say "neuron generate $1: $line"
  else say "neuron generate $1 FAILED: $(tail -c 600 $R/gen-$1.err)"; fi
}

# The servers at 1 and 64 streams under bench-serve (prompt 128, gen 64, one request a client).
STREAMS="--concurrency 1,64 --prompt-len 128 --gen 64 --requests-per-client 1 --warmup 1 --timeout 200"
serve_neuron() {  # serve_neuron NAME FILE
  start_neuron $1 "$2:device=cuda:0" && bench $1 $STREAMS
  stop_server $1; say "neuron serve $1 done"
}
serve_llama() {  # serve_llama NAME FILE (after wait_llama_build)
  start_llama $1 $2 64 16384 -ngl 99 && bench $1 $STREAMS
  stop_server $1; say "llama serve $1 done"
}

# wait_llama_build: waits for build_llama_cuda; sets L (the binaries) and LLAMA_SERVER.
wait_llama_build() {
  wait $build; tail -3 /tmp/llama-build.log >>$R/steps.log; say "llama build done"
  L=/tmp/llama/b/bin LLAMA_SERVER=/tmp/llama/b/bin/llama-server
}

# profile_prefill LABEL CONFIG PROMPT: each kernel's device time, summed by name, over `neuron bench
# --dummy-weights` at PROMPT tokens (bench prefills twice: warm-up and timed; the weights' fill kernels are
# left out). Nsight Systems where the image has it, else Nsight Compute (slower: every kernel replayed).
# Table in $R/prof-LABEL.txt, raw in $R/prof-LABEL.*.
profile_prefill() {
  local args="bench --dummy-weights --device cuda:0 --config $2 --prompt-len $3 --gen 2"
  local nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$nsys" ]; then
    timeout 200 $nsys profile -t cuda --cuda-graph-trace=node -o $WORK/prof-$1 --force-overwrite true \
      .bundle/run neuron $args >$R/prof-$1.out 2>$R/prof-$1.err
    say "nsys $1 rc=$?"
    $nsys stats -r cuda_gpu_kern_sum -f csv -o $R/prof-$1 $WORK/prof-$1.nsys-rep >>$R/prof-$1.err 2>&1
    python3 - $R/prof-$1_cuda_gpu_kern_sum.csv >$R/prof-$1.txt <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
rows = [r for r in rows if "fill_random" not in r["Name"]]
tot = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"kernels {sum(int(r['Instances']) for r in rows)}, total {tot/1e6:.1f} ms")
for r in sorted(rows, key=lambda r: -float(r["Total Time (ns)"]))[:30]:
    print(f"  {r['Name'][:90]:90s} {int(r['Instances']):6d} {float(r['Total Time (ns)'])/1e6:9.2f} ms")
PY
  else
    local ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 150 $ncu --clock-control none --graph-profiling node --kernel-name 'regex:^(?!.*fill_random)' \
      --metrics gpu__time_duration.sum --csv --page raw .bundle/run neuron $args >$R/prof-$1.csv 2>$R/prof-$1.err
    say "ncu $1 rc=$?"
    python3 bench/cuda/ncu_table.py $R/prof-$1.csv >$R/prof-$1.txt
  fi
  xz -9 $R/prof-$1*.csv 2>/dev/null
  cat $R/prof-$1.txt >>$R/steps.log
}

# the_30b: Qwen3-30B-A3B as one random bf16 GGUF (moe_gguf.py, 61 GB in /dev/shm: the page cache), then
# llama-quantize's Q4_K_M of it (QUANT_30B=0 skips that half): `neuron generate` at 2048 prompt tokens (TTFT,
# decode, load_ms from the page cache), both servers at 1 and 64 streams, `llama-bench -p 2048 -n 128`. Needs
# build_llama_cuda's llama-bench, llama-server (and llama-quantize) and /tmp/qtok.
the_30b() {
  local G=$WORK/q30b-bf16.gguf Q=$WORK/q30b-q4_k_m.gguf
  PYTHONPATH=$root/.convert/gguf-py python3 bench/cuda/moe_gguf.py $G --tokenizer /tmp/qtok --shape qwen3-30b-a3b --type bf16 >>$R/gguf.log 2>&1
  say "gguf 30b rc=$? $(du -b $G | cut -f1)"
  neuron_gen 30b-bf16 $G 2048 128
  serve_neuron neuron-30b $G
  wait_llama_build
  timeout 100 $L/llama-bench -m $G -ngl 99 -p 2048 -n 128 -r 2 -o jsonl >>$R/llama-bench.jsonl 2>>$R/llama-bench.err
  say "llama-bench 30b bf16 rc=$? $(tail -1 $R/llama-bench.jsonl | cut -c1-300)"
  serve_llama llama-30b $G
  [ "${QUANT_30B:-1}" = 1 ] || { rm -f $G; return; }
  timeout 150 $L/llama-quantize $G $Q Q4_K_M 16 >$R/quantize.log 2>&1; say "quantize rc=$? $(du -b $Q | cut -f1)"
  rm -f $G
  neuron_gen 30b-q4_k_m $Q 2048 128
  timeout 100 $L/llama-bench -m $Q -ngl 99 -p 2048 -n 128 -r 2 -o jsonl >>$R/llama-bench.jsonl 2>>$R/llama-bench.err
  say "llama-bench 30b q4_k_m rc=$? $(tail -1 $R/llama-bench.jsonl | cut -c1-300)"
  rm -f $Q
}

# the_35b: the Qwen3.5-35B-A3B shape as one random Q8_0 GGUF (37 GB: bf16 would not fit the card beside its
# KV), after the 27B's file is gone: `neuron generate` at 128 prompt tokens, both servers at 1 and 64 streams,
# `llama-bench -n 64` (after wait_llama_build; LLAMA_35B=0: neuron alone).
the_35b() {
  local G=$WORK/q35-35b-q8_0.gguf
  PYTHONPATH=$root/.convert/gguf-py python3 bench/cuda/hybrid_gguf.py $G --tokenizer /tmp/qtok --shape qwen3.5-35b-a3b --type q8_0 >>$R/gguf.log 2>&1
  say "gguf 35b rc=$? $(du -b $G | cut -f1)"
  neuron_gen 35b-prompt-128 $G 128 64
  serve_neuron neuron-35b $G
  [ "${LLAMA_35B:-1}" = 1 ] || { rm -f $G; return; }
  wait_llama_build
  timeout 100 $L/llama-bench -m $G -ngl 99 -p 2048 -n 64 -r 1 -o jsonl >>$R/llama-bench.jsonl 2>>$R/llama-bench.err
  say "llama-bench 35b rc=$? $(tail -1 $R/llama-bench.jsonl | cut -c1-400)"
  serve_llama llama-35b $G
  rm -f $G
}
