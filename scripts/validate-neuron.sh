#!/usr/bin/env bash
# Checks a running neuron daemon end to end: health, load (with
# tensor_parallel), /v1/models, chat (blocking and streamed), completions,
# tokenize/detokenize, metrics, unload. Prints one PASS/FAIL line per check,
# the answers and timings, and exits non-zero on any failure.
#
#   scripts/validate-neuron.sh [--base-url URL] [--model ID_OR_DIR] [--tp-size N] [--quant Q]
#   scripts/validate-neuron.sh [host[:port]] [model_id] [quant] [tp_size]     (positional form)
#
# Defaults: http://127.0.0.1:13131, the bundled models/qwen3-tiny-a, tp 1.
# When tp > 1 and the host has GPUs, devices 0..N-1 are requested
# (NEURON_DEVICES="0,2" overrides); on a CPU-only host ranks run on the CPU.
# A model that was already loaded with the same tensor_parallel is used as is
# and left loaded; one this script loads is unloaded at the end.
# NEURON_API_KEY is sent as the bearer token when set. Needs bash and curl only.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
base_url="http://127.0.0.1:13131"
model="$(cd "$here/../models/qwen3-tiny-a" 2>/dev/null && pwd || echo "$here/../models/qwen3-tiny-a")"
tp=1
quant=""
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --base-url) base_url="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --tp-size) tp="$2"; shift 2 ;;
    --quant) quant="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [ ${#positional[@]} -ge 1 ]; then
  case "${positional[0]}" in http://*|https://*) base_url="${positional[0]}" ;; *) base_url="http://${positional[0]}" ;; esac
  case "$base_url" in http://*:*|https://*:*) ;; *) base_url="$base_url:13131" ;; esac
fi
[ ${#positional[@]} -ge 2 ] && model="${positional[1]}"
[ ${#positional[@]} -ge 3 ] && quant="${positional[2]}"
[ ${#positional[@]} -ge 4 ] && tp="${positional[3]}"
base_url="${base_url%/}"
case "$tp" in ''|*[!0-9]*) echo "validate-neuron: tp size must be a positive integer, got '$tp'" >&2; exit 2 ;; esac
# A relative directory is named by its absolute path (the id clients then use).
case "$model" in /*) ;; *) if [ -d "$model" ]; then model="$(cd "$model" && pwd)"; fi ;; esac

failures=0
auth=()
[ -n "${NEURON_API_KEY:-}" ] && auth=(-H "Authorization: Bearer $NEURON_API_KEY")

pass() { echo "PASS $1${2:+: $2}"; }
fail() { echo "FAIL $1${2:+: $2}"; failures=$((failures + 1)); }
now_ms() { date +%s%3N; }
json_escape() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'; }
# The first string value of "key" in compact JSON (enough for these checks).
json_str() { grep -o "\"$1\":\"\([^\"\\\\]\|\\\\.\)*\"" | head -n1 | sed -e "s/^\"$1\":\"//" -e 's/"$//'; }
json_num() { grep -o "\"$1\":[0-9.]*" | head -n1 | sed -e "s/^\"$1\"://"; }

# request METHOD PATH [BODY] -> sets status, body, ms
request() {
  local out t0
  t0=$(now_ms)
  if [ $# -ge 3 ]; then
    out=$(curl -sS -m 300 -X "$1" "${auth[@]}" -H 'Content-Type: application/json' --data-binary "$3" -w $'\n%{http_code}' "$base_url$2" 2>&1)
  else
    out=$(curl -sS -m 300 -X "$1" "${auth[@]}" -w $'\n%{http_code}' "$base_url$2" 2>&1)
  fi
  status="${out##*$'\n'}"
  body="${out%$'\n'*}"
  ms=$(( $(now_ms) - t0 ))
}

echo "validating $base_url with model $model (tensor_parallel $tp${quant:+, quant $quant})"
# The daemon names a directory model by its real path (every spelling is one model).
if [ -d "$model" ]; then model="$(realpath "$model")"; fi
id="$(json_escape "$model")"
# What the node lists it as: a path by its folder name, a Hugging Face id as is.
name="$id"
if [ -d "$model" ]; then name="$(json_escape "$(basename "$model")")"; fi

request GET /health
if [ "$status" = 200 ]; then pass health "$body"; else fail health "HTTP $status $body"; echo "$failures check(s) failed"; exit 1; fi

devices=""
if [ "$tp" -gt 1 ]; then
  if [ -n "${NEURON_DEVICES:-}" ]; then
    devices="[${NEURON_DEVICES}]"
  else
    request GET /discovery
    gpus=$(printf '%s' "$body" | grep -o '"index":[0-9]*' | wc -l)
    if [ "$gpus" -ge "$tp" ]; then devices="[$(seq -s, 0 $((tp - 1)))]"; fi
  fi
fi
spec="{\"model_id\":\"$id\",\"tensor_parallel\":$tp,\"wait\":true"
[ -n "$devices" ] && spec="$spec,\"devices\":$devices"
[ -n "$quant" ] && spec="$spec,\"quant\":\"$(json_escape "$quant")\""
spec="$spec}"

loaded_here=0
request POST /models/load "$spec"
if [ "$status" = 200 ] && printf '%s' "$body" | grep -q '"status":"loaded"'; then
  loaded_here=1
  pass load "tensor_parallel $(printf '%s' "$body" | json_num tensor_parallel), devices $(printf '%s' "$body" | grep -o '"devices":\[[^]]*\]' | head -n1 | sed 's/"devices"://'), ${ms} ms"
elif [ "$status" = 409 ]; then
  request GET /models
  # Keys come sorted, so an entry's tensor_parallel follows its id.
  after_id="${body#*\"id\":\"$name\"}"
  loaded_tp=$(printf '%s' "$after_id" | json_num tensor_parallel)
  if [ "$after_id" != "$body" ] && [ "$loaded_tp" = "$tp" ]; then
    pass load "already loaded with tensor_parallel $tp (left loaded afterwards)"
  else
    fail load "'$model' is already loaded with tensor_parallel ${loaded_tp:-?}; unload it first"
  fi
else
  fail load "HTTP $status $body"
fi

# /v1/models lists the name clients send (the model's one id, as /models), never its path.
request GET /v1/models
if [ "$status" = 200 ] && printf '%s' "$body" | grep -qF "\"id\":\"$name\""; then pass v1/models; else fail v1/models "HTTP $status $body"; fi

chat_body="{\"model\":\"$id\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello in five words.\"}],\"max_tokens\":24,\"temperature\":0}"
request POST /v1/chat/completions "$chat_body"
chat_content=""
if [ "$status" = 200 ] && printf '%s' "$body" | grep -q '"object":"chat.completion"'; then
  chat_content=$(printf '%s' "$body" | json_str content)
  pass "chat" "${ms} ms, $(printf '%s' "$body" | json_num completion_tokens) tokens, finish $(printf '%s' "$body" | json_str finish_reason)"
  echo "     answer: $chat_content"
else
  fail chat "HTTP $status $body"
fi

stream_body="${chat_body%\}},\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
request POST /v1/chat/completions "$stream_body"
if [ "$status" = 200 ] && printf '%s' "$body" | grep -q '^data: \[DONE\]' \
   && printf '%s' "$body" | grep -q '"delta":{"content":"","role":"assistant"}' \
   && printf '%s' "$body" | grep -q '"finish_reason":"\(stop\|length\)"' \
   && printf '%s' "$body" | grep -q '"choices":\[\],'; then
  pass "chat stream" "${ms} ms, $(printf '%s' "$body" | grep -c '^data: ') events"
else
  fail "chat stream" "HTTP $status $(printf '%s' "$body" | tail -n 5)"
fi

request POST /v1/completions "{\"model\":\"$id\",\"prompt\":\"The capital of France is\",\"max_tokens\":16,\"temperature\":0}"
if [ "$status" = 200 ] && printf '%s' "$body" | grep -q '"object":"text_completion"'; then
  pass completions "${ms} ms"
  echo "     text: $(printf '%s' "$body" | json_str text)"
else
  fail completions "HTTP $status $body"
fi

request POST /tokenize "{\"model\":\"$id\",\"prompt\":\"Hello, world!\"}"
tokens=$(printf '%s' "$body" | grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens"://')
if [ "$status" = 200 ] && [ -n "$tokens" ]; then
  pass tokenize "$tokens"
  request POST /detokenize "{\"model\":\"$id\",\"tokens\":$tokens}"
  if [ "$status" = 200 ] && [ "$(printf '%s' "$body" | json_str prompt)" = "Hello, world!" ]; then pass detokenize; else fail detokenize "HTTP $status $body"; fi
else
  fail tokenize "HTTP $status $body"
fi

request GET /metrics
if [ "$status" = 200 ] && printf '%s' "$body" | grep -q '^neuron_http_requests_total{' && printf '%s' "$body" | grep -q '^neuron_generated_tokens_total{'; then
  pass metrics
else
  fail metrics "HTTP $status"
fi

if [ "$loaded_here" = 1 ]; then
  request POST /models/unload "{\"model_id\":\"$id\"}"
  if [ "$status" = 200 ]; then pass unload "${ms} ms"; else fail unload "HTTP $status $body"; fi
  request POST /v1/completions "{\"model\":\"$id\",\"prompt\":\"x\",\"max_tokens\":1}"
  if [ "$status" = 404 ]; then pass "unloaded model answers 404"; else fail "unloaded model answers 404" "HTTP $status"; fi
fi

if [ "$failures" -gt 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
