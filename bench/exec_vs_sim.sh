#!/usr/bin/env bash
# The issue-6 loop on the host: profile -> calibrated -> sim (prediction) vs exec
# (measurement), for 1..N ranks, printed as a Markdown table with the load average (host
# timings are only as good as the cores are free: run it on an idle machine, with no more
# ranks than free cores). Usage: bench/exec_vs_sim.sh [build-dir] [config] [max-pp]
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
config=${2:-$root/configs/exec/vlm-host.toml}
max_pp=${3:-2}
loom="$build/cli/loom"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| ranks | load avg | predicted ms | measured ms | iteration error | median per-op error |"
echo "|---:|---:|---:|---:|---:|---:|"
for pp in $(seq 1 "$max_pp"); do
  set_pp=(--set "parallel.pp=$pp" --set "cluster.gpus_per_node=$pp")
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$loom" profile "$config" "${set_pp[@]}" --out "$work/p$pp.csv" --repeats 21 -q >/dev/null
  # Both plan with the calibrated costs, so they run one schedule (the stage partition
  # follows the cost model; loom compare rejects runs of different schedules).
  calibrated=(--set cost.model=calibrated --set "cost.profile=$work/p$pp.csv")
  "$loom" sim "$config" "${set_pp[@]}" "${calibrated[@]}" \
    --backend evaluator --no-plot -q --out "$work/pred$pp" >/dev/null
  "$loom" exec "$config" "${set_pp[@]}" "${calibrated[@]}" --iterations 9 --no-check --no-plot -q \
    --out "$work/meas$pp" >/dev/null
  out=$("$loom" compare "$work/pred$pp" "$work/meas$pp" --no-plot)
  "${LOOM_PYTHON:-/usr/bin/python3}" - "$pp" "$load" "$out" <<'PY'
import re, sys
pp, load, out = sys.argv[1:]
it = re.search(r"predicted ([\d.]+) ms, measured ([\d.]+) ms, error ([+-][\d.]+%)", out)
op = re.search(r"median \|err\| ([\d.]+%)\n", out)
print(f"| {pp} | {load} | {it.group(1)} | {it.group(2)} | {it.group(3)} | {op.group(1) if op else '-'} |")
PY
done
