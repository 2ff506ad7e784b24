#!/usr/bin/env bash
# A 1,000-point evaluator sweep of the README study's workload (studies/vlm-microbatches.toml:
# the frozen-ViT VLM on 4 A40s, its five schedulers), to measure `loom sweep` itself.
#
#   bash bench/sweep_bench.sh [BUILD_DIR] [JOBS]
#
# Runs the sweep with -j JOBS (default: the core count) and with -j 1 and prints, for each,
# the wall time of the whole command (process start-up included) and the sweep's own
# accounting (stderr of `loom sweep`): time to check and resolve every point's config,
# time running, and per point the plan + simulate time measured inside the worker against
# the overhead (core time per point minus that: worker hand-off, result message, CSV row).
# Both runs must write byte-identical results.
set -euo pipefail
build=${1:-build}
jobs=${2:-$(nproc)}
loom=$build/cli/loom
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 5 schedulers x 50 microbatch counts x pp {2, 4} x microbatch sizes {1, 2} = 1,000 points.
cat >"$work/bench.toml" <<STUDY
base = "$root/configs/examples/vlm-frozen.toml"
schedulers = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2"]
backend = "evaluator"
[axes]
"parallel.pp" = [2, 4]
"schedule.microbatch_size" = [1, 2]
"schedule.microbatches" = { start = 1, stop = 50 }
STUDY

for j in "$jobs" 1; do
  start=$(date +%s.%N)
  "$loom" sweep "$work/bench.toml" -q -j "$j" --out "$work/out-$j" >/dev/null 2>"$work/timing"
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v j="$j" 'BEGIN {
    printf "-j %d: %.2f s wall for the command (%.0f points/s)\n", j, e - s, 1000 / (e - s) }'
  sed 's/^loom: /      /' "$work/timing"
done
cmp -s "$work/out-$jobs/results.csv" "$work/out-1/results.csv" ||
  { echo "error: -j $jobs and -j 1 results differ" >&2; exit 1; }
/usr/bin/python3 -c 'import csv,sys,collections
c = collections.Counter(r["status"] for r in csv.DictReader(open(sys.argv[1])))
print("points: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + "; -j results identical")' \
  "$work/out-1/results.csv"
