#!/usr/bin/env bash
# Replay speed and memory (issue 16's targets): every shipped trace x every policy, a
# generated 1,000-node 24-hour Poisson trace, and `loom plan templates` at 200 and 1,000
# nodes. Prints Markdown tables: wall seconds and peak resident memory per run (GNU time).
#   bash bench/replay_bench.sh [BUILD_DIR]      (default build)
# Configs: configs/paper/oobleck-gpt3-1.3b.toml in simulation mode (evaluator backend:
# every distinct layout a policy trains on is planned and evaluated) and the measured
# GPT-2 config (the artifact's throughput tables). Targets: < 10 s per shipped trace and
# policy; the 1,000-node trace < 60 s and < 2 GB; templates < 2 s (200) and < 30 s (1,000).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
LOOM="$BUILD/cli/loom"
[ -x "$LOOM" ] || { echo "replay_bench: $LOOM not found (build first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "replay_bench: needs GNU time (apt-get install time)" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# Runs "$@" and prints "seconds peak_MiB"; the command's output goes to $WORK/out.log.
measure() {
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" > "$WORK/out.log" 2>&1 ||
    { echo "replay_bench: failed: $*" >&2; cat "$WORK/out.log" >&2; exit 1; }
  awk '{ printf "%.2f %.0f", $1, $2 / 1024 }' "$WORK/time"
}

SIM="$ROOT/configs/paper/oobleck-gpt3-1.3b.toml"
MEASURED="$ROOT/configs/paper/oobleck-gpt2-measured.toml"
echo "| trace | policy | GPT-3 1.3B simulated: s | MiB | GPT-2 measured: s | MiB |"
echo "|---|---|---:|---:|---:|---:|"
for trace in "$ROOT"/traces/spot/* "$ROOT"/traces/oobleck/*.csv; do
  case "$trace" in *COMMIT|*LICENSE) continue ;; esac
  extra=()
  case "$trace" in *gcp-v100*) extra=(--out-of-order drop) ;; esac
  for policy in oobleck varuna-like bamboo-like; do
    read -r s1 m1 <<< "$(measure "$LOOM" replay "$SIM" --trace "$trace" "${extra[@]}" \
      --policy "$policy" --backend evaluator -q --out "$WORK/r" --force)"
    read -r s2 m2 <<< "$(measure "$LOOM" replay "$MEASURED" --trace "$trace" "${extra[@]}" \
      --policy "$policy" -q --out "$WORK/r" --force)"
    echo "| $(basename "$trace") | $policy | $s1 | $m1 | $s2 | $m2 |"
  done
done

"$LOOM" trace generate --kind poisson --nodes 1000 --rate 100 --rejoin 10min \
  --duration 24h --seed 1 --out "$WORK/poisson-1000.csv" > /dev/null
echo
echo "| generated 1,000-node 24 h Poisson trace (100 failures/h, 10 min re-join) | policy | s | MiB |"
echo "|---|---|---:|---:|"
for policy in oobleck varuna-like bamboo-like; do
  read -r s m <<< "$(measure "$LOOM" replay "$SIM" --trace "$WORK/poisson-1000.csv" \
    --policy "$policy" --backend evaluator -q --out "$WORK/r" --force)"
  echo "| GPT-3 1.3B simulated | $policy | $s | $m |"
done

echo
echo "| loom plan templates (GPT-3 1.3B) | s | MiB |"
echo "|---|---:|---:|"
for nodes in 200 1000; do
  read -r s m <<< "$(measure "$LOOM" plan templates "$SIM" --nodes "$nodes" -q)"
  echo "| $nodes nodes | $s | $m |"
done
