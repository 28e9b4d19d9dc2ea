#!/usr/bin/env bash
# `neuron serve` with no model flag serves the bundled model; curl drives chat
# and completions, streaming and not; SIGTERM with a stream in flight still
# ends that stream properly and exits 0.   Usage: daemon_curl.sh BUILD/neuron
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bin="$1"

start_daemon "$bin" --shutdown-grace-ms 1000
curl -sf "$NEURON_BASE_URL/health" | grep -q '"status":"ok"' || die "/health"
wait_loaded
echo "PASS health, bundled model loaded"

chat=$(curl -sf "$NEURON_BASE_URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":12,"temperature":0}') || die "chat"
echo "$chat" | grep -q '"object":"chat.completion"' || die "chat object: $chat"
echo "$chat" | grep -q '"role":"assistant"' || die "chat role: $chat"
echo "$chat" | grep -q '"completion_tokens":[1-9]' || die "chat usage: $chat"
echo "PASS chat"

comp=$(curl -sf "$NEURON_BASE_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}') || die "completion"
echo "$comp" | grep -q '"object":"text_completion"' || die "completion object: $comp"
echo "PASS completion"

stream=$(curl -sfN "$NEURON_BASE_URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}') || die "chat stream"
echo "$stream" | head -n1 | grep -q '^data: {.*"delta":{"content":"","role":"assistant"}' || die "role chunk first: $stream"
echo "$stream" | grep -q '"finish_reason":"length"' || die "finish chunk: $stream"
echo "$stream" | grep -q '"choices":\[\],.*"usage"' || die "usage chunk: $stream"
[ "$(echo "$stream" | grep '^data: ' | tail -n1)" = "data: [DONE]" ] || die "ends with [DONE]: $stream"
echo "PASS chat stream"

cstream=$(curl -sfN "$NEURON_BASE_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"stream":true}') || die "completion stream"
[ "$(echo "$cstream" | grep '^data: ' | tail -n1)" = "data: [DONE]" ] || die "completion stream ends with [DONE]"
streamed=$(echo "$cstream" | grep '^data: {' | grep -o '"text":"[^"]*"' | sed 's/"text":"//; s/"$//' | tr -d '\n')
blocking=$(echo "$comp" | grep -o '"text":"[^"]*"' | sed 's/"text":"//; s/"$//')
[ "$streamed" = "$blocking" ] || die "streamed completion '$streamed' != blocking '$blocking'"
echo "PASS completion stream equals the blocking answer"

# Temperature 0: the daemon's text is the decoded greedy tokens of `neuron generate`.
ids=$(curl -sf "$NEURON_BASE_URL/tokenize" -d '{"prompt":"Once upon a time"}' | grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens":\[//; s/\]//')
[ -n "$ids" ] || die "tokenize"
gen_tokens=$("$bin" generate --model "$TINY_MODEL" --prompt-ids "$ids" --max-tokens 12 --temperature 0 --json 2>/dev/null | tail -n1 | grep -o '"tokens":\[[0-9,]*\]' | sed 's/"tokens"://')
[ -n "$gen_tokens" ] || die "neuron generate"
gen_text=$(curl -sf "$NEURON_BASE_URL/detokenize" -d "{\"tokens\":$gen_tokens}" | grep -o '"prompt":"[^"]*"' | sed 's/"prompt":"//; s/"$//')
[ "$gen_text" = "$blocking" ] || die "daemon text '$blocking' != neuron generate's decoded tokens '$gen_text'"
echo "PASS completion equals the decoded greedy tokens of neuron generate"

code=$(curl -s -o /dev/null -w '%{http_code}' "$NEURON_BASE_URL/v1/chat/completions" -d '{"messages": 5}')
[ "$code" = 400 ] || die "bad request answered $code"
echo "PASS bad request -> 400"

# Graceful shutdown with a long stream in flight: it must end with [DONE].
out="$(mktemp)"
curl -sN "$NEURON_BASE_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"go","max_tokens":4000,"ignore_eos":true,"stream":true}' >"$out" &
curl_pid=$!
for i in $(seq 1 100); do grep -q '^data: {' "$out" && break; sleep 0.1; done
stop_daemon
wait "$curl_pid"
[ "$(grep '^data: ' "$out" | tail -n1)" = "data: [DONE]" ] || { tail -n3 "$out"; rm -f "$out"; die "in-flight stream was not ended properly on shutdown"; }
rm -f "$out"
echo "PASS in-flight stream ended with [DONE] on SIGTERM"
