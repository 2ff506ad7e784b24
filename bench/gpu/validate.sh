#!/usr/bin/env bash
# The GPU validation of docs/gpu-validation.md as one script, for a lent GPU machine that
# has the driver and CUDA's Python wheels but no Debian packages: run bench/gpu/pack.sh
# here first and carry the pack. Every step has its own time limit and is reported in
# summary.md (rc, seconds); the whole log goes to validate.log. Results go to $OUT (the
# device tool's folder) or out/gpu.
#   usage: bench/gpu/validate.sh [pack-dir | pack.tar.xz]   (default .devpack; an archive
#          from pack.sh is unpacked beside itself first)
#   LOOM_GPU_BACKEND=host runs the same steps through the host executor (a dry run);
#   LOOM_GPU_CONFIG and LOOM_GPU_SETS (--set options) replace the timed model;
#   LOOM_GPU_QUICK=1 stops after the tests, the attention bench and the gradient check;
#   LOOM_GPU_SKIP="fig3-trainable ..." skips the named steps (to fit a short lease).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
pack_arg=${1:-.devpack}
if [[ $pack_arg == *.tar.xz ]]; then
  tar -C "$(dirname "$pack_arg")" -xJf "$pack_arg" || { echo "validate.sh: cannot unpack $pack_arg" >&2; exit 2; }
  pack_arg=${pack_arg%.tar.xz}
fi
pack=$(cd "$pack_arg" && pwd)
out=${OUT:-$root/out/gpu}
backend=${LOOM_GPU_BACKEND:-cuda}
mkdir -p "$out"
exec > >(tee "$out/validate.log") 2>&1

# cuBLAS and NCCL come from the machine's CUDA wheels; the rest from the pack.
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
wheel_libs=$(find ${site:+"$site/nvidia"} /usr/local/cuda/lib64 -maxdepth 4 \
               \( -name 'libcublas.so.13' -o -name 'libnccl.so.2' \) -printf '%h\n' 2>/dev/null |
               sort -u | paste -sd:)
export LD_LIBRARY_PATH="$pack/lib${wheel_libs:+:$wheel_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tests read configs through the source path compiled into them.
compiled_root=$(strings "$pack/bin/loom_executor_cuda_tests" | grep -m1 -o '^/[^ ]*/configs/' | sed 's|/configs/$||')
if [[ -n $compiled_root && ! -e $compiled_root ]]; then
  mkdir -p "$(dirname "$compiled_root")" && ln -s "$root" "$compiled_root"
fi
loom="$pack/bin/loom"
export LOOM_PYTHON=$(command -v python3) LOOM_ANALYSIS_DIR=$root/analysis
summary="$out/summary.md"
echo "| step | rc | seconds |" >"$summary"
echo "|---|---:|---:|" >>"$summary"

step() {  # step NAME LIMIT_S CMD...: runs CMD with a deadline, records rc and time
  local name=$1 limit=$2
  shift 2
  if [[ " ${LOOM_GPU_SKIP:-} " == *" $name "* ]]; then
    echo "=== $name: skipped (LOOM_GPU_SKIP)"
    echo "| $name | skipped | 0 |" >>"$summary"
    return
  fi
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@"
  local rc=$?
  echo "=== $name: rc $rc, $((SECONDS - start)) s"
  echo "| $name | $rc | $((SECONDS - start)) |" >>"$summary"
}

step machine 30 bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
  ldd '"$loom"' | grep -E "not found|cublas|nccl|cudart"'
# Ordered by what matters most, each limited so that the whole stays within ~9 minutes.
step kernel-tests 90 "$pack/bin/loom_kernel_cuda_tests" --gtest_brief=1
step executor-tests 120 "$pack/bin/loom_executor_cuda_tests" --gtest_brief=1
step attention-bench 60 "$pack/bin/loom_attention_bench" --tokens 8192 --heads 16 --dim 128

small=configs/exec/vlm-host.toml
step gradient-check 60 "$loom" exec $small --backend "$backend" --set parallel.pp=1 \
  --set cluster.gpus_per_node=1 --no-plot --out "$out/run/check-small"

if [[ ${LOOM_GPU_QUICK:-0} == 1 ]]; then  # tests and the gradient check only
  cat "$summary"
  exit 0
fi

cfg=${LOOM_GPU_CONFIG:-configs/examples/vlm-frozen.toml}
# The executor merges 2x2 patches by mean pooling, so the projector reads 1,280-wide rows.
read -ra one_gpu <<<"${LOOM_GPU_SETS:---set model.modules.projector.hidden=1280}"
one_gpu+=(--set parallel.pp=1 --set cluster.gpus_per_node=1 --set cluster.gpu=H100)
calibrated=(--set cost.model=calibrated --set "cost.profile=$out/run/profile.csv")
step profile 120 "$loom" profile $cfg "${one_gpu[@]}" --backend "$backend" --out "$out/run/profile.csv"
step predict 30 "$loom" sim $cfg "${one_gpu[@]}" "${calibrated[@]}" --backend evaluator --no-plot \
  --out "$out/run/pred"
# Plans with the calibrated costs too, so both run one schedule; the median of 3 iterations
# (the first pays cuBLAS heuristics and the memory pool's growth).
step measure 180 "$loom" exec $cfg "${one_gpu[@]}" "${calibrated[@]}" --backend "$backend" \
  --iterations 3 --no-check --no-plot --out "$out/run/meas"
step compare 20 "$loom" compare "$out/run/pred" "$out/run/meas" --ops --png "$out/compare.png"

# cornstarch-arxiv Figure 3(b): per-module forward/backward with frozen and trainable
# encoder and LLM (projector trainable in both); the frozen run is the measurement above.
ln -sfn meas "$out/run/fig3-frozen"
step fig3-trainable 150 "$loom" exec $cfg "${one_gpu[@]}" --backend "$backend" --no-check \
  --no-plot --out "$out/run/fig3-trainable" --set model.modules.vision.frozen=false \
  --set model.modules.llm.frozen=false
for run in fig3-frozen fig3-trainable; do
  [[ -f $out/run/$run/timeline.csv ]] || continue
  awk -F, -v run=$run 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    $col["kind"] ~ /^[FBIW]$/ { pass = ($col["kind"] == "F") ? "Fwd" : "Bwd";
      t[$col["module"] " " pass] += $col["end_s"] - $col["start_s"] }
    END { for (k in t) printf "%s %s %.2f ms total\n", run, k, 1000 * t[k] }' \
    "$out/run/$run/timeline.csv" | sort | tee -a "$out/fig3.txt"
done
# The host executor's prediction error on this machine's cores (issue 6's loop).
mkdir -p "$out/run/build/cli" && ln -sf "$loom" "$out/run/build/cli/loom"
step exec-vs-sim-host 60 bash bench/exec_vs_sim.sh "$out/run/build" configs/exec/vlm-host.toml 4
tar -C "$out" -czf "$out/runs.tgz" run && rm -rf "$out/run"
cat "$summary"
