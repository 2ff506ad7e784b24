#!/usr/bin/env bash
# Scale benchmark of the two backends (issue 2): one 1F1B iteration at 1,024 and 4,096
# GPUs, SimGrid vs the contention-free evaluator. Prints a Markdown table of planning and
# backend wall time, peak RSS of the whole process (planning included) and simulated
# activities per second; the evaluator's time is the best of 5 runs. Usage: bench/run_scale.sh [build-dir]
set -euo pipefail
build=${1:-build}
loom="$build/cli/loom"
root=$(cd "$(dirname "$0")/.." && pwd)
echo "| GPUs | backend | operations | activities | planning s | backend wall s | peak RSS MiB | activities/s | simulated iteration s |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for cfg in pp16-dp64 pp16-dp256; do
  for backend in evaluator simgrid; do
    json=$("$loom" sim "$root/configs/bench/$cfg.toml" --backend "$backend" --bench -q)
    /usr/bin/python3 - "$json" <<'PY'
import json, sys
b = json.loads(sys.argv[1])
print(f"| {b['gpus']} | {b['backend']} | {b['operations']} | {b['activities']} | {b['planning_s']:.2f} | {b['wall_s']:.3f} | "
      f"{b['peak_rss_bytes'] / 2**20:.0f} | {b['activities_per_s']:.0f} | {b['iteration_time_s']:.4f} |")
PY
  done
done
