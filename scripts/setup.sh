#!/usr/bin/env bash
# Installs Loom's Debian dependencies (if missing) and builds it into ./build.
# Run as root on a fresh Debian (bookworm) machine, or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make pkg-config libsimgrid-dev libboost-graph-dev libfccp-dev nlohmann-json3-dev
          libcli11-dev libtomlplusplus-dev libgtest-dev python3-matplotlib
          libglpk-dev python3-dev pybind11-dev python3-pandas
          protobuf-compiler libprotobuf-dev python3-protobuf libjemalloc-dev)
LOOM_INSTALL_TAG=setup bash scripts/install_packages.sh "${packages[@]}"

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR="$werror" >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/cli/loom" >&2
