# Shared by the device-call scripts run-27b.sh and run-30b.sh (sourced from the repository root on the GPU
# machine): results under $OUT/r (packed into $OUT/r.tgz by pack_results: a call returns only a few files),
# scratch in /dev/shm/work, bench/serve/lib.sh's servers and bench-serve, a step log with seconds, and
# llama.cpp (.convert/llama-src.tar.xz, node-llama-cpp's source under llama.cpp/) built for CUDA in the
# background.
root=$PWD; O=$OUT R=$OUT/r; mkdir -p $R
export OUT=$R WORK=/dev/shm/work NEURON="$root/.bundle/run neuron"
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

# ids N SEED: N random token ids (ordinary Qwen3 tokens), comma-separated.
ids() { python3 -c "import random; r=random.Random($2); print(','.join(str(r.randrange(1000,150000)) for _ in range($1)))"; }

# neuron_gen LABEL FILE PROMPT GEN: `neuron generate` twice over PROMPT random ids then GEN tokens on the GPU;
# its timings (prefill, decode, load_ms) as one line {"label", ...} in neuron-gen.jsonl.
neuron_gen() {
  timeout 120 .bundle/run neuron generate --model $2 --device cuda:0 --prompt-ids $(ids $3 5) --max-tokens $(($4 + 1)) \
    --ignore-eos --temperature 0 --repeat 2 --json 2>$R/gen-$1.err | tail -1 |
    python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({'label': '$1', **d['timings']}))" >>$R/neuron-gen.jsonl
  say "neuron generate $1: $(tail -1 $R/neuron-gen.jsonl)"
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
    python3 - $R/prof-$1.csv >$R/prof-$1.txt <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows: print("no rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); ti = h.index("gpu__time_duration.sum")
agg = collections.defaultdict(lambda: [0, 0.0]); tot = 0.0
for r in rows[2:]:
    try: t = float(r[ti].replace(",", ""))
    except ValueError: continue
    n = r[ki].split("(")[0][:90]; agg[n][0] += 1; agg[n][1] += t; tot += t
print(f"kernels {sum(a[0] for a in agg.values())}, total {tot/1e6:.1f} ms (unit {rows[1][ti]})")
for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1])[:30]: print(f"  {n:90s} {c:6d} {t/1e6:9.2f} ms")
PY
  fi
  xz -9 $R/prof-$1*.csv 2>/dev/null
  cat $R/prof-$1.txt >>$R/steps.log
}
