#!/usr/bin/env bash
# Installs the Debian 12 packages neuron builds and tests with (chromium for
# the web UI's browser test; dpkg-dev and systemd for the package test's
# dpkg-shlibdeps and systemd-analyze). Idempotent:
# packages already present are skipped, so a warm machine pays nothing.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build ccache pkg-config git curl
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libpcre2-dev
  libutf8proc-dev libgloo-dev libcurl4-openssl-dev libboost1.81-dev
  clang libclang-rt-14-dev nodejs npm
  chromium fonts-dejavu-core dpkg-dev systemd
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (nodesource, nvm): only need the commands.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
