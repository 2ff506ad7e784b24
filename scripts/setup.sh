#!/usr/bin/env bash
# Installs Loom's Debian dependencies (if missing) and builds it into ./build.
# Run as root on a fresh Debian (bookworm) machine, or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make pkg-config libsimgrid-dev libboost-graph-dev libfccp-dev nlohmann-json3-dev
          libcli11-dev libtomlplusplus-dev libgtest-dev python3-matplotlib
          libglpk-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR="$werror" >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/cli/loom" >&2
