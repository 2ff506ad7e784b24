#!/usr/bin/env bash
# Packs what the GPU validation (bench/gpu/validate.sh) runs on a lent GPU machine that
# has the NVIDIA driver, CUDA's Python wheels (cuBLAS, NCCL) and nothing of Debian's:
# the CUDA-enabled binaries of a local build plus every shared library they need that is
# neither glibc/libstdc++ nor CUDA's (SimGrid, ns-3, Boost, GLPK, toml++, ...), and
# libcudart (small; cuBLAS and NCCL are too large to carry and are found there).
# Usage: bench/gpu/pack.sh [build-dir] [pack-dir]   (default build, .devpack; also writes
# pack-dir.tar.xz, what travels: carry it and pass it to validate.sh)
set -euo pipefail
build=${1:-build}
pack=${2:-.devpack}
bins=(cli/loom bench/loom_attention_bench tests/kernels/loom_kernel_cuda_tests
      tests/executor_cuda/loom_executor_cuda_tests)
for b in "${bins[@]}"; do
  [[ -x $build/$b ]] || { echo "pack.sh: $build/$b missing: build with nvcc on PATH" >&2; exit 2; }
done
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
system='^/lib(64)?/(x86_64-linux-gnu/)?(ld-linux|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)[.-]'
for b in "${bins[@]}"; do
  cp "$build/$b" "$pack/bin/"
  ldd "$build/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    [[ $lib =~ $system ]] && continue
    case $(basename "$lib") in libcublas*|libnccl*) continue ;; esac
    cp -L -n "$lib" "$pack/lib/"
  done
done
strip --strip-unneeded "$pack"/bin/* "$pack"/lib/*   # the tree that travels is capped
du -sh "$pack"
# The device tool moves at most 64 MiB with the working tree; the pack alone is ~58 MB, so
# it travels as an xz archive (~15 MB) that validate.sh unpacks (2026-12-04).
tar -C "$(dirname "$pack")" -cJf "$pack.tar.xz" "$(basename "$pack")"
du -sh "$pack.tar.xz"
