#!/usr/bin/env bash
# Batch-1 decode and prefill on one H200, neuron and llama.cpp on the SAME
# files: a random-weight Qwen3-8B (neuron gen-model, bf16 safetensors), that
# checkpoint as a bf16 GGUF (gguf-py), quantized by llama.cpp's own
# llama-quantize to Q4_K_M and Q8_0 (the bf16 GGUF is then deleted: the disk
# is 64 GB). neuron also runs the safetensors as bf16 and with --quant fp8.
# Made to fit one 10-minute device call (16 cores, no internet). Run from the
# repo root on the GPU machine with a neuron CUDA bundle at .bundle (holding
# neuron and a static llama-quantize) and .llama/llama-src.tar.xz carried:
#   bash bench/cuda/vs-llama-h200.sh
# Timeline: the llama.cpp CUDA build of the llama-bench target alone starts at
# once in the background (its own session, nice 19, -j LLAMA_JOBS); in the
# foreground: gen-model, the bf16 GGUF, neuron on the safetensors (bf16 and
# --quant fp8; before llama-quantize, so the checkpoint can be deleted and the
# disk never holds more than two bf16 copies, ~32 GB for 8B), llama-quantize
# (QUANT_THREADS) to each of QUANTS, neuron on each GGUF. Each neuron run is
#   neuron generate --model F --device DEVICE --prompt-ids <PROMPT random ids>
#     --max-tokens GEN+1 --ignore-eos --temperature 0 --repeat REPS --json
# (decode over all runs, prefill of the last, warm run; the lines say whether
# the llama build was running alongside); then `neuron bench --dummy-weights`
# once for the GPU's copy bandwidth; then, once the build is done (or given up
# at LLAMA_DEADLINE s after the start: neuron's results are kept either way):
#   llama-bench -m F LLAMA_BENCH_ARGS -p PROMPT -n GEN -r REPS -o jsonl
# on each GGUF, and again with -fa V for each V in LLAMA_FA while the time
# allows (this llama.cpp's default is -fa auto). llama-bench's decode runs
# at depth 0; neuron's after the PROMPT-token prompt (a 512-position KV read
# is ~1.5% of an 8B step's bytes).
# Results: $OUT/results.jsonl, one JSON line per measurement
#   {"engine","file","kind":"prefill"|"decode","tok_s","n",...}
# plus {"kind":"bytes_per_step","file","bytes",...} for each GGUF (tensor
# bytes less token_embd.weight's, which a decode step does not read unless
# the embeddings are tied; gguf-py's GGUFReader) and for the bf16 safetensors,
# and {"kind":"copy_bandwidth","gbs"} (neuron bench's copy_bandwidth_gbs).
# $OUT/run.log: every step with its time, and the closing table (file, engine,
# decode and prefill tok/s, bytes a step, and bytes*tok_s/copy bandwidth: the
# fraction of the bandwidth floor). $WORK is removed on exit.
#
# Knobs (environment), defaults first:
#   OUT=.serve-out/vs-llama-h200 WORK=/tmp/neuron-vs-llama-h200 (scratch, removed)
#   NEURON=".bundle/run neuron" LLAMA_QUANTIZE=".bundle/run llama-quantize"
#   CONFIG=qwen3-8b (gen-model preset) SHARDS=4 DEVICE=cuda:0
#   PROMPT=512 GEN=128 REPS=3 QUANTS="Q4_K_M Q8_0" ST_RUNS="bf16 fp8"
#   (safetensors runs: bf16 = no --quant, else --quant VALUE; empty: none)
#   QUANT_THREADS=$(nproc) NEURON_ARGS= (extra neuron generate flags)
#   NEURON_TIMEOUT=300 BANDWIDTH=1 (0 skips the neuron bench copy-bandwidth run)
#   LLAMA_BUILD=build-llama-cuda (kept between calls on a warm machine)
#   LLAMA_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DGGML_CUDA_NCCL=OFF"
#   LLAMA_JOBS=$(nproc) LLAMA_DEADLINE=480 (s after the start)
#   PAUSE_BUILD=0 (1: SIGSTOP the build while neuron measures; it then ends later)
#   LLAMA_BENCH=$LLAMA_BUILD/bin/llama-bench (a binary, or an .xz of one; setting
#   it implies SKIP_LLAMA_BUILD=1) SKIP_LLAMA_BUILD=0
#   SAVE_LLAMA_BENCH=0 (1: hand the built llama-bench back as
#   $OUT/llama-bench-cuda.xz.part-*; cat them into .llama/llama-bench-cuda.xz,
#   carry it and set LLAMA_BENCH=.llama/llama-bench-cuda.xz to skip the build)
#   LLAMA_BENCH_ARGS="-ngl 99" LLAMA_FA=1 (extra runs with -fa V; empty: none)
#   LLAMA_TIMEOUT=300 (one llama-bench run) TIME_LIMIT=570 (s: an -fa run that
#   would end after it is skipped)
# Smoke test without a GPU (tiny model, llama.cpp's CPU build):
#   CONFIG=qwen3-0.6b SHARDS=1 DEVICE=cpu PROMPT=32 GEN=8 REPS=1 NEURON=build/neuron \
#   LLAMA_QUANTIZE=.llama/build-cpu-noamx/bin/llama-quantize \
#   LLAMA_BENCH=.llama/build-cpu-noamx/bin/llama-bench LLAMA_BENCH_ARGS="-t 2" \
#   bash bench/cuda/vs-llama-h200.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-$root/.serve-out/vs-llama-h200}
WORK=${WORK:-/tmp/neuron-vs-llama-h200}
NEURON=${NEURON:-$root/.bundle/run neuron}
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-$root/.bundle/run llama-quantize}
CONFIG=${CONFIG:-qwen3-8b}
SHARDS=${SHARDS:-4}
DEVICE=${DEVICE:-cuda:0}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
REPS=${REPS:-3}
QUANTS=${QUANTS-Q4_K_M Q8_0}
ST_RUNS=${ST_RUNS-bf16 fp8}
QUANT_THREADS=${QUANT_THREADS:-$(nproc)}
NEURON_ARGS=${NEURON_ARGS:-}
NEURON_TIMEOUT=${NEURON_TIMEOUT:-300}
BANDWIDTH=${BANDWIDTH:-1}
LLAMA_BUILD=${LLAMA_BUILD:-$root/build-llama-cuda}
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:--DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DGGML_CUDA_NCCL=OFF}
LLAMA_JOBS=${LLAMA_JOBS:-$(nproc)}
LLAMA_DEADLINE=${LLAMA_DEADLINE:-480}
PAUSE_BUILD=${PAUSE_BUILD:-0}
if [ -n "${LLAMA_BENCH:-}" ]; then SKIP_LLAMA_BUILD=${SKIP_LLAMA_BUILD:-1}; else SKIP_LLAMA_BUILD=${SKIP_LLAMA_BUILD:-0}; fi
LLAMA_BENCH=${LLAMA_BENCH:-$LLAMA_BUILD/bin/llama-bench}
SAVE_LLAMA_BENCH=${SAVE_LLAMA_BENCH:-0}
LLAMA_BENCH_ARGS=${LLAMA_BENCH_ARGS--ngl 99}
LLAMA_FA=${LLAMA_FA-1}
LLAMA_TIMEOUT=${LLAMA_TIMEOUT:-300}
TIME_LIMIT=${TIME_LIMIT:-570}
case "$LLAMA_BENCH" in /*) ;; *) LLAMA_BENCH=$root/$LLAMA_BENCH ;; esac
case "$LLAMA_BUILD" in /*) ;; *) LLAMA_BUILD=$root/$LLAMA_BUILD ;; esac

mkdir -p "$OUT" "$WORK" || exit 1
# shellcheck source=bench/serve/lib.sh
source "$root/bench/serve/lib.sh"
: >"$OUT/results.jsonl"
BUILD_PID=
REPORTED=0
helper="$WORK/vs_llama_helper.py"

# The table; at the end, or from the EXIT trap when the script stops early.
report() {
  [ "$REPORTED" = 1 ] && return 0
  REPORTED=1
  [ -f "$helper" ] && "$PYTHON" "$helper" table "$OUT/results.jsonl" 2>&1 | tee -a "$OUT/run.log"
}
build_signal() {  # build_signal SIG: to the whole build (cmake, ninja, nvcc: one process group)
  [ -n "$BUILD_PID" ] && kill -0 "$BUILD_PID" 2>/dev/null && { kill "-$1" -- "-$BUILD_PID" 2>/dev/null || kill "-$1" "$BUILD_PID" 2>/dev/null; }
  return 0
}
stop_build() {
  [ -n "$BUILD_PID" ] || return 0
  if kill -0 "$BUILD_PID" 2>/dev/null; then
    build_signal TERM
    build_signal CONT
    for _ in $(seq 100); do kill -0 "$BUILD_PID" 2>/dev/null || break; sleep 0.1; done
    build_signal KILL
  fi
  wait "$BUILD_PID" 2>/dev/null
  BUILD_PID=
}
cleanup() {
  report
  stop_build
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# All the JSON work: parsing both engines' output, gguf-py, the table.
cat >"$helper" <<'PY'
import json, os, sys

def emit(rec):
    print(json.dumps(rec), flush=True)

def base():
    return {"config": os.environ["CONFIG"], "device": os.environ["DEVICE"], "reps": int(os.environ["REPS"])}

cmd = sys.argv[1]
if cmd == "neuron":  # neuron FILE_LABEL ARGS BUILD_RUNNING < generate's stdout
    label, args, building = sys.argv[2], sys.argv[3], {"0": "none", "1": "running", "2": "paused"}[sys.argv[4]]
    lines = [l for l in sys.stdin.read().splitlines() if l.strip().startswith("{")]
    if not lines:
        sys.exit("no JSON line from neuron generate")
    t = json.loads(lines[-1])["timings"]
    for kind, n in (("prefill", int(os.environ["PROMPT"])), ("decode", int(os.environ["GEN"]))):
        rec = {"engine": "neuron", "file": label, "kind": kind, "tok_s": t[kind + "_tok_s"], "n": n}
        rec.update(base(), args=args, llama_build=building)
        emit(rec)
elif cmd == "llama":  # llama FILE_LABEL ARGS < llama-bench -o jsonl
    label, args = sys.argv[2], sys.argv[3]
    got = 0
    for line in sys.stdin:
        if not line.strip().startswith("{"):
            continue
        r = json.loads(line)
        kind = "prefill" if r["n_prompt"] and not r["n_gen"] else "decode" if r["n_gen"] and not r["n_prompt"] else "mixed"
        rec = {"engine": "llama.cpp", "file": label, "kind": kind, "tok_s": r["avg_ts"], "n": r["n_prompt"] or r["n_gen"]}
        rec.update(base(), args=args, stddev=r.get("stddev_ts"), flash_attn=r.get("flash_attn"),
                   n_gpu_layers=r.get("n_gpu_layers"), build_commit=r.get("build_commit"))
        emit(rec)
        got += 1
    if not got:
        sys.exit("no JSON line from llama-bench")
elif cmd == "gguf-bytes":  # gguf-bytes FILE_LABEL PATH (PYTHONPATH has gguf-py)
    from gguf import GGUFReader
    label, path = sys.argv[2], sys.argv[3]
    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(path, "r").tensors}
    total, embd = sum(tensors.values()), tensors.get("token_embd.weight", 0)
    tied = "output.weight" not in tensors  # then the LM head reads token_embd every step
    emit({"kind": "bytes_per_step", "file": label, "bytes": total if tied else total - embd, "tensor_bytes": total,
          "token_embd_bytes": embd, "tied_embeddings": tied, "file_bytes": os.path.getsize(path),
          "config": os.environ["CONFIG"]})
elif cmd == "st-bytes":  # st-bytes FILE_LABEL DIR: a bf16 checkpoint's bytes a step (all but the embedding)
    import struct
    label, d = sys.argv[2], sys.argv[3]
    sizes = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with open(os.path.join(d, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                for name, info in json.loads(fh.read(n)).items():
                    if name != "__metadata__":
                        sizes[name] = info["data_offsets"][1] - info["data_offsets"][0]
    total, embd = sum(sizes.values()), sizes.get("model.embed_tokens.weight", 0)
    tied = "lm_head.weight" not in sizes
    emit({"kind": "bytes_per_step", "file": label, "bytes": total if tied else total - embd, "tensor_bytes": total,
          "token_embd_bytes": embd, "tied_embeddings": tied, "config": os.environ["CONFIG"]})
elif cmd == "bandwidth":  # bandwidth < neuron bench --json
    lines = [l for l in sys.stdin.read().splitlines() if l.strip().startswith("{")]
    if not lines:
        sys.exit("no JSON line from neuron bench")
    r = json.loads(lines[-1])
    run = (r.get("runs") or [{}])[0]
    emit({"engine": "neuron", "kind": "copy_bandwidth", "gbs": r["copy_bandwidth_gbs"], "device": r.get("device"),
          "bench_config": r.get("config"), "bench_decode_tok_s": run.get("decode_tok_s"),
          "bench_achieved_gbs": run.get("achieved_gbs")})
elif cmd == "summary":  # summary < result lines: "prefill N tok/s, decode M tok/s"
    print(", ".join("%s %.1f tok/s" % (r["kind"], r["tok_s"]) for r in map(json.loads, sys.stdin) if "tok_s" in r))
elif cmd == "table":  # table results.jsonl
    recs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    bw = next((r["gbs"] for r in recs if r.get("kind") == "copy_bandwidth"), None)
    per_step = {r["file"]: r["bytes"] for r in recs if r.get("kind") == "bytes_per_step"}
    rows, order = {}, []
    for r in recs:
        if r.get("kind") not in ("prefill", "decode"):
            continue
        eng = r["engine"] + (" " + r["args"] if r["engine"] == "llama.cpp" and r.get("args") else "")
        key = (r["file"], eng)
        if key not in rows:
            rows[key] = {}
            order.append(key)
        rows[key][r["kind"]] = r["tok_s"]
    print("copy bandwidth: " + (f"{bw:.0f} GB/s" if bw else "not measured"))
    head = f"{'file':<18} {'engine':<16} {'decode tok/s':>12} {'prefill tok/s':>13} {'GB/step':>8} {'floor':>6} {'vs llama':>8}"
    print(head)
    print("-" * len(head))
    files = list(dict.fromkeys(f for f, _ in order))
    files = [f for f in files if not f.startswith("safetensors")] + [f for f in files if f.startswith("safetensors")]
    for f, eng in sorted(order, key=lambda k: (files.index(k[0]), k[1] != "neuron", k[1])):
        d, p = rows[(f, eng)].get("decode"), rows[(f, eng)].get("prefill")
        b = per_step.get(f)
        floor = f"{b * d / (bw * 1e9):.2f}" if (b and d and bw) else "-"
        llama = rows.get((f, "llama.cpp"), {}).get("decode")
        vs = f"{d / llama:.2f}x" if (eng == "neuron" and d and llama) else "-"
        fmt = lambda v, w: f"{v:>{w}.1f}" if v is not None else f"{'-':>{w}}"
        print(f"{f:<18} {eng:<16} {fmt(d, 12)} {fmt(p, 13)} {(f'{b / 1e9:.2f}' if b else '-'):>8} {floor:>6} {vs:>8}")
    print("floor: bytes a decode step reads x decode tok/s / copy bandwidth (1.00 = at the copy speed)")
PY
export CONFIG DEVICE REPS PROMPT GEN

t_start=$SECONDS
log "vs-llama-h200: $CONFIG on $DEVICE, prompt $PROMPT, gen $GEN, $REPS reps; GGUFs: ${QUANTS:-none}; safetensors: ${ST_RUNS:-none}"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
  df -h "$WORK" | tail -1
} >>"$OUT/run.log" 2>&1
# shellcheck disable=SC2086
$NEURON --version >>"$OUT/run.log" 2>&1 || { log "cannot run $NEURON"; exit 1; }

# llama.cpp's source once, here, before the background build and to_gguf both want it.
HAVE_SRC=0
llama_source && HAVE_SRC=1

# --- llama-bench: a given binary, or the CUDA build in the background -------------------------------
LLAMA_OK=1
llama_cuda_build() {
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  # shellcheck disable=SC2086
  LLAMA_TARGETS=llama-bench build_llama "$LLAMA_BUILD" $LLAMA_CMAKE_ARGS
}
if [ "$SKIP_LLAMA_BUILD" = 1 ]; then
  case "$LLAMA_BENCH" in
    *.xz)
      mkdir -p "$WORK/llama-bin"
      if xz -dc "$LLAMA_BENCH" >"$WORK/llama-bin/llama-bench" 2>>"$OUT/run.log" && chmod +x "$WORK/llama-bin/llama-bench"; then
        LLAMA_BENCH=$WORK/llama-bin/llama-bench
      else
        log "cannot unpack $LLAMA_BENCH"
      fi
      ;;
  esac
  if [ -x "$LLAMA_BENCH" ]; then
    log "llama-bench: $LLAMA_BENCH (no build)"
  else
    log "no llama-bench at $LLAMA_BENCH: llama.cpp is skipped"
    LLAMA_OK=0
  fi
elif [ "$HAVE_SRC" = 1 ]; then
  log "llama.cpp: building llama-bench in $LLAMA_BUILD in the background (nice 19, -j $LLAMA_JOBS): $LLAMA_CMAKE_ARGS"
  export OUT WORK root here LLAMA_SRC LLAMA_BUILD LLAMA_CMAKE_ARGS LLAMA_JOBS PYTHON
  export -f log llama_source build_llama llama_cuda_build
  # Its own session, so stop_build reaches the whole build (cmake, ninja, nvcc) as one group.
  setsid nice -n 19 bash -c llama_cuda_build >"$WORK/llama-background.log" 2>&1 &
  BUILD_PID=$!
  t_build=$SECONDS
else
  log "no llama.cpp source: llama.cpp is skipped"
  LLAMA_OK=0
fi
building() { [ -n "$BUILD_PID" ] && kill -0 "$BUILD_PID" 2>/dev/null && echo 1 || echo 0; }

# --- neuron's runs, one function ------------------------------------------------------------------
ids=$("$PYTHON" -c "import random; r = random.Random(7); print(','.join(str(r.randrange(1000, 150000)) for _ in range($PROMPT)))")
run_neuron() {  # run_neuron MODEL LABEL [flags...]
  local model=$1 label=$2 t0=$SECONDS rc=0 b; shift 2
  [ "$PAUSE_BUILD" = 1 ] && build_signal STOP
  b=$(building)
  [ "$PAUSE_BUILD" = 1 ] && [ "$b" = 1 ] && b=2
  log "neuron generate $label${*:+ ($*)}"
  # shellcheck disable=SC2086
  timeout -k 10 "$NEURON_TIMEOUT" $NEURON generate --model "$model" --device "$DEVICE" --prompt-ids "$ids" \
    --max-tokens $((GEN + 1)) --ignore-eos --temperature 0 --repeat "$REPS" --json "$@" $NEURON_ARGS \
    >"$WORK/neuron.out" 2>"$WORK/neuron.err" || rc=$?
  cat "$WORK/neuron.err" >>"$OUT/run.log"
  [ "$PAUSE_BUILD" = 1 ] && build_signal CONT
  if [ "$rc" = 0 ] && "$PYTHON" "$helper" neuron "$label" "$*" "$b" <"$WORK/neuron.out" >"$WORK/neuron.jsonl" 2>>"$OUT/run.log"; then
    cat "$WORK/neuron.jsonl" >>"$OUT/results.jsonl"
    log "neuron $label in $((SECONDS - t0)) s: $("$PYTHON" "$helper" summary <"$WORK/neuron.jsonl")$([ "$b" = 1 ] && echo ' (llama build running)')$([ "$b" = 2 ] && echo ' (llama build paused)')"
  else
    log "neuron generate $label failed (rc $rc) after $((SECONDS - t0)) s; its last output:"
    tail -c 1500 "$WORK/neuron.out" | tee -a "$OUT/run.log" >&2
    tail -c 1500 "$WORK/neuron.err" >&2  # already in run.log
  fi
}
disk_free() { df -h "$WORK" | tail -1 | awk '{print $4 " free"}'; }

# --- the checkpoint, its bf16 GGUF, neuron on the safetensors ------------------------------------
# The safetensors runs come before llama-quantize so that the checkpoint can go first: the disk
# then holds at most two copies of the bf16 weights (checkpoint and bf16 GGUF, ~32 GB for 8B).
ckpt="$WORK/model"
gen_model "$ckpt" "$CONFIG" "$SHARDS" || { log "gen-model $CONFIG failed"; exit 1; }
[ -f "$ckpt/config.json" ] || { log "gen-model $CONFIG wrote no checkpoint"; exit 1; }
"$PYTHON" "$helper" st-bytes "safetensors bf16" "$ckpt" 2>>"$OUT/run.log" | tee -a "$OUT/results.jsonl" >>"$OUT/run.log"
HAVE_BF16_GGUF=0
if [ -n "$QUANTS" ]; then
  if [ "$HAVE_SRC" = 1 ] && GGUF_TYPE=bf16 to_gguf "$ckpt" "$WORK/bf16.gguf"; then
    HAVE_BF16_GGUF=1
    log "bf16 GGUF: $(du -h "$WORK/bf16.gguf" | cut -f1); disk $(disk_free)"
  else
    log "no bf16 GGUF: no GGUF runs"
  fi
fi
t0=$SECONDS
for s in $ST_RUNS; do
  if [ "$s" = bf16 ]; then run_neuron "$ckpt" "safetensors bf16"; else run_neuron "$ckpt" "safetensors $s" --quant "$s"; fi
done
[ -n "$ST_RUNS" ] && log "neuron safetensors runs done in $((SECONDS - t0)) s"
rm -rf "$ckpt"

# --- the quantized GGUFs (llama.cpp's llama-quantize), neuron on them -----------------------------
GGUFS=()
BYTES_PIDS=()
if [ "$HAVE_BF16_GGUF" = 1 ]; then
  for q in $QUANTS; do
    t0=$SECONDS
    # shellcheck disable=SC2086
    if $LLAMA_QUANTIZE "$WORK/bf16.gguf" "$WORK/$q.gguf" "$q" "$QUANT_THREADS" >>"$OUT/run.log" 2>&1; then
      GGUFS+=("$q")
      log "llama-quantize $q ($QUANT_THREADS threads) in $((SECONDS - t0)) s: $(du -h "$WORK/$q.gguf" | cut -f1)"
      # Its bytes a step while the next one quantizes (gguf-py reads the 150k-token vocabulary slowly).
      PYTHONPATH="$LLAMA_SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$helper" gguf-bytes "$q" "$WORK/$q.gguf" \
        >"$WORK/$q.bytes.jsonl" 2>>"$OUT/run.log" &
      BYTES_PIDS+=($!)
    else
      log "llama-quantize $q failed after $((SECONDS - t0)) s (its output is above in run.log)"
      rm -f "$WORK/$q.gguf"
    fi
  done
fi
rm -f "$WORK/bf16.gguf"
for pid in "${BYTES_PIDS[@]}"; do wait "$pid"; done
for q in "${GGUFS[@]}"; do
  if [ -s "$WORK/$q.bytes.jsonl" ]; then tee -a "$OUT/results.jsonl" <"$WORK/$q.bytes.jsonl" >>"$OUT/run.log"; else log "gguf-py could not read $q.gguf"; fi
done
log "GGUFs ready at $((SECONDS - t_start)) s: ${GGUFS[*]:-none}; disk $(disk_free)"
t0=$SECONDS
for q in "${GGUFS[@]}"; do run_neuron "$WORK/$q.gguf" "$q"; done
[ ${#GGUFS[@]} -gt 0 ] && log "neuron GGUF runs done in $((SECONDS - t0)) s"

if [ "$BANDWIDTH" = 1 ]; then
  t0=$SECONDS
  [ "$PAUSE_BUILD" = 1 ] && build_signal STOP
  log "neuron bench $CONFIG --dummy-weights (copy bandwidth)"
  # shellcheck disable=SC2086
  if timeout -k 10 "$NEURON_TIMEOUT" $NEURON bench --config "$CONFIG" --dummy-weights --device "$DEVICE" --prompt-len 128 --gen 32 --json \
    >"$WORK/bench.out" 2>"$WORK/bench.err" &&
    "$PYTHON" "$helper" bandwidth <"$WORK/bench.out" >"$WORK/bench.jsonl" 2>>"$OUT/run.log"; then
    cat "$WORK/bench.jsonl" >>"$OUT/results.jsonl"
    cat "$WORK/bench.err" >>"$OUT/run.log"
    log "copy bandwidth in $((SECONDS - t0)) s: $(cat "$WORK/bench.jsonl")"
  else
    log "neuron bench failed after $((SECONDS - t0)) s"
    { tail -c 1500 "$WORK/bench.out"; tail -c 1500 "$WORK/bench.err"; } | tee -a "$OUT/run.log" >&2
  fi
  [ "$PAUSE_BUILD" = 1 ] && build_signal CONT
fi

# --- llama.cpp -------------------------------------------------------------------------------------
if [ -n "$BUILD_PID" ]; then
  if [ "$(building)" = 1 ]; then log "waiting for the llama.cpp build (deadline ${LLAMA_DEADLINE} s after the start; now $((SECONDS - t_start)) s)"; fi
  while [ "$(building)" = 1 ] && [ $((SECONDS - t_start)) -lt "$LLAMA_DEADLINE" ]; do sleep 1; done
  if [ "$(building)" = 1 ]; then
    log "llama.cpp build not done by the deadline ($LLAMA_DEADLINE s; it ran $((SECONDS - t_build)) s): stopped, llama.cpp is skipped"
    tail -5 "$WORK/llama-build.log" 2>/dev/null | tee -a "$OUT/run.log" >&2
    stop_build
    LLAMA_OK=0
  else
    wait "$BUILD_PID"
    rc=$?
    BUILD_PID=
    if [ "$rc" = 0 ] && [ -x "$LLAMA_BENCH" ]; then
      log "llama.cpp build done: $LLAMA_BENCH, $((SECONDS - t_build)) s after it started"
    else
      log "llama.cpp build failed (rc $rc, $((SECONDS - t_build)) s): llama.cpp is skipped"
      tail -20 "$WORK/llama-background.log" | tee -a "$OUT/run.log" >&2
      LLAMA_OK=0
    fi
    if [ "$LLAMA_OK" = 1 ] && [ "$SAVE_LLAMA_BENCH" = 1 ]; then
      rm -f "$OUT"/llama-bench-cuda.xz.part-*
      xz -T0 -6 -c "$LLAMA_BENCH" | split -b 15M - "$OUT/llama-bench-cuda.xz.part-"
      log "llama-bench saved as $(find "$OUT" -maxdepth 1 -name 'llama-bench-cuda.xz.part-*' | wc -l) part(s) in $OUT"
    fi
  fi
fi

run_llama() {  # run_llama LABEL [extra llama-bench flags...]; sets LAST_S
  local label=$1 t0=$SECONDS rc=0; shift
  log "llama-bench $label${LLAMA_BENCH_ARGS:+ $LLAMA_BENCH_ARGS}${*:+ $*}"
  # shellcheck disable=SC2086
  timeout -k 10 "$LLAMA_TIMEOUT" "$LLAMA_BENCH" -m "$WORK/$label.gguf" $LLAMA_BENCH_ARGS -p "$PROMPT" -n "$GEN" -r "$REPS" -o jsonl "$@" \
    >"$WORK/llama.out" 2>"$WORK/llama.err" || rc=$?
  cat "$WORK/llama.err" >>"$OUT/run.log"
  LAST_S=$((SECONDS - t0))
  if [ "$rc" = 0 ] && "$PYTHON" "$helper" llama "$label" "$*" <"$WORK/llama.out" >"$WORK/llama.jsonl" 2>>"$OUT/run.log"; then
    cat "$WORK/llama.jsonl" >>"$OUT/results.jsonl"
    log "llama.cpp $label${*:+ $*} in $LAST_S s: $("$PYTHON" "$helper" summary <"$WORK/llama.jsonl")"
  else
    log "llama-bench $label $* failed (rc $rc) after $LAST_S s"
    tail -c 1500 "$WORK/llama.out" | tee -a "$OUT/run.log" >&2
    tail -c 1500 "$WORK/llama.err" >&2  # already in run.log
  fi
}
if [ "$LLAMA_OK" = 1 ] && [ ${#GGUFS[@]} -gt 0 ]; then
  declare -A took
  for q in "${GGUFS[@]}"; do run_llama "$q"; took[$q]=$LAST_S; done
  for fa in $LLAMA_FA; do
    for q in "${GGUFS[@]}"; do
      if [ $((SECONDS - t_start + took[$q] + 5)) -gt "$TIME_LIMIT" ]; then
        log "llama-bench $q -fa $fa skipped: it would end after TIME_LIMIT ($TIME_LIMIT s; now $((SECONDS - t_start)) s, the first run took ${took[$q]} s)"
        continue
      fi
      run_llama "$q" -fa "$fa"
    done
  done
fi

log "done in $((SECONDS - t_start)) s: $(wc -l <"$OUT/results.jsonl") line(s) in $OUT/results.jsonl"
report
