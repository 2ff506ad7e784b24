#!/usr/bin/env bash
# Failure-free throughput by live node count: each replay policy's layout on a trace that
# holds N nodes for the whole window (checkpoint saves off, so only the layout's speed
# counts), beside the artifact's measured Oobleck and Varuna throughput at N
# (traces/oobleck/*throughput_by_nodes.json). It shows how the cost model ranks Varuna-like's
# grid against Oobleck's plan on the same nodes, which the measurements rank otherwise
# (docs/replay.md, "Simulation mode").
#
#   bash bench/replay_steady_state.sh [build-dir] [model: gpt3-2.7b | gpt3-6.7b | ...] [N...]
set -euo pipefail
build=${1:-build}
model=${2:-gpt3-2.7b}
shift $(($# < 2 ? $# : 2))
nodes=("$@")
[[ ${#nodes[@]} -gt 0 ]] || nodes=(16 20 24 28 30)
root=$(cd "$(dirname "$0")/.." && pwd)
config=$root/configs/paper/oobleck-$model.toml
loom="$build/cli/loom"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
throughput() {  # policy nodes -> average samples/s over a 2 h window
  printf '2024-01-01, 00:00:00, %d\n2024-01-01, 03:00:00, %d\n' "$2" "$2" >"$work/trace.csv"
  "$loom" replay "$config" --trace "$work/trace.csv" --format counts --hours 2 --policy "$1" \
    --backend evaluator --set replay.checkpoint_save=0s --out "$work/$1" --force --json -q |
    "${LOOM_PYTHON:-/usr/bin/python3}" -c \
      'import json, sys; print("%.3f" % json.load(sys.stdin)["average_throughput_samples_per_s"])'
}
measured() {  # table nodes -> samples/s the artifact measured (the JSON's model key)
  "${LOOM_PYTHON:-/usr/bin/python3}" - "$root/traces/oobleck/$1" "$model" "$2" <<'PY'
import json, sys
path, model, nodes = sys.argv[1:]
table = json.load(open(path))["throughput_samples_per_s"]
key = {"gpt3-2.7b": "GPT-3-2.7b", "gpt3-6.7b": "GPT-3-6.7b"}.get(model, model)
print(f"{table[key][nodes]:.3f}" if key in table and nodes in table[key] else "-")
PY
}
echo "| nodes | Loom Oobleck | Loom Varuna-like | measured Oobleck | measured Varuna |"
echo "|---:|---:|---:|---:|---:|"
for n in "${nodes[@]}"; do
  echo "| $n | $(throughput oobleck "$n") | $(throughput varuna-like "$n") |" \
    "$(measured throughput_by_nodes.json "$n") | $(measured varuna_throughput_by_nodes.json "$n") |"
done
