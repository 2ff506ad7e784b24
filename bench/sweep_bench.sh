#!/usr/bin/env bash
# A 1,000-point evaluator sweep of the README study's workload (studies/vlm-microbatches.toml:
# the frozen-ViT VLM on 4 A40s), to measure `loom sweep` itself: points per second, and the
# per-point overhead beyond the simulation (fork, config parsing, planning, result rows).
#
#   bash bench/sweep_bench.sh [BUILD_DIR] [JOBS]
#
# It times (1) the 1,000-point sweep with -j JOBS (default: the core count) and with -j 1, and
# (2) simulations alone: `loom sim --bench` reports planning + evaluator wall time of one point
# in-process; the overhead per point is the -j 1 sweep's time per point minus that (rough:
# the sampled points are ok ones, the sweep also has cheaper failed and infeasible points).
set -euo pipefail
build=${1:-build}
jobs=${2:-$(nproc)}
loom=$build/cli/loom
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 5 schedulers x 50 microbatch counts x pp {1, 2, 4} x 4 microbatch sizes = 3,000 > 1,000:
# take microbatches 1..50 with pp {2, 4} and sizes {1, 2} and 5 schedulers = 1,000 points.
cat >"$work/bench.toml" <<STUDY
base = "$root/configs/examples/vlm-frozen.toml"
schedulers = ["gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved-1f1b"]
backend = "evaluator"
[axes]
"schedule.microbatches" = { start = 1, stop = 50 }
"parallel.pp" = [2, 4]
"schedule.microbatch_size" = [1, 2]
STUDY

start=$(date +%s.%N)
"$loom" sweep "$work/bench.toml" -q -j "$jobs" --out "$work/out"
end=$(date +%s.%N)
points=$(($(wc -l <"$work/out/results.csv") - 1))
# One job: the cost of a point without two of them sharing the cores.
start1=$(date +%s.%N)
"$loom" sweep "$work/bench.toml" -q -j 1 --out "$work/out1"
end1=$(date +%s.%N)
cmp -s "$work/out/results.csv" "$work/out1/results.csv" || echo "warning: -j 1 and -j $jobs differ" >&2

# In-process cost of typical points (planning + evaluator), best of 5 inside --bench.
sims=""
for mb in 1 25 50; do
  for pp in 2 4; do
    sims="$sims $("$loom" sim "$root/configs/examples/vlm-frozen.toml" --backend evaluator --bench -q \
      --set schedule.microbatches=$mb --set parallel.pp=$pp --set schedule.name=zb-h1 |
      /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["planning_s"] + d["wall_s"])')"
  done
done
statuses=$(/usr/bin/python3 -c 'import csv,sys,collections; c=collections.Counter(r["status"] for r in csv.DictReader(open(sys.argv[1]))); print(", ".join(f"{k} {v}" for k,v in sorted(c.items())))' "$work/out/results.csv")
awk -v start="$start" -v end="$end" -v start1="$start1" -v end1="$end1" -v points="$points" \
  -v jobs="$jobs" -v sims="$sims" \
  -v statuses="$statuses" 'BEGIN {
  wall = end - start
  n = split(sims, s, " ")
  for (i = 1; i <= n; i++) sim += s[i]
  sim /= n
  wall1 = end1 - start1
  one = wall1 / points
  printf "points                 %d (%s)\n", points, statuses
  printf "wall time              %.2f s with -j %d, %.2f s with -j 1\n", wall, jobs, wall1
  printf "points per second      %.1f with -j %d, %.1f with -j 1\n", points / wall, jobs, points / wall1
  printf "time per point, -j 1   %.2f ms (the whole sweep, start-up included, / points)\n", one * 1000
  printf "plan + evaluate alone  %.2f ms (loom sim --bench in-process, zb-h1, mean of %d ok points)\n", sim * 1000, n
  printf "overhead per point     %.2f ms (the difference: start-up, config parsing and hashing, worker hand-off, rows)\n", (one - sim) * 1000
}'
