#!/usr/bin/env bash
# Dissertation Fig 2.10 / Fig 2.11 style figures for the EC2 p3 spot trace: Oobleck,
# Varuna-like and Bamboo-like on one GPT-3 config in simulation mode (evaluator backend,
# EC2's 2-minute preemption notice), plotted by analysis/replay_plot.py:
#   bash analysis/fig_2_10.sh [CONFIG] [OUT_DIR]
# writes OUT_DIR/replay_throughput.png (throughput over time, Fig 2.10 style) and
# OUT_DIR/replay_breakdown.png (where the time went, Fig 2.11 style); it prints each
# policy's average throughput (the replays themselves go to a temporary directory). Defaults: configs/paper/oobleck-gpt3-350m.toml
# (GPT-3 Medium) and docs/figures/ec2-p3-gpt3-350m. Same inputs, byte-identical PNGs.
# A *-measured.toml config replays in measured-throughput mode instead, e.g.
#   bash analysis/fig_2_10.sh configs/paper/oobleck-gpt2-measured.toml docs/figures/ec2-p3-gpt2
# Environment: LOOM (default build/cli/loom), LOOM_PYTHON (default /usr/bin/python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOOM="${LOOM:-$ROOT/build/cli/loom}"
PY="${LOOM_PYTHON:-/usr/bin/python3}"
CONFIG="${1:-$ROOT/configs/paper/oobleck-gpt3-350m.toml}"
OUT="${2:-$ROOT/docs/figures/ec2-p3-gpt3-350m}"
TRACE="$ROOT/traces/spot/ec2-p3.csv"

[ -x "$LOOM" ] || { echo "fig_2_10: $LOOM not found (build first, or set LOOM)" >&2; exit 2; }
MODE="simulation mode (evaluator)"
case "$CONFIG" in *measured*) MODE="measured-throughput mode (artifact table)" ;; esac
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT
dirs=()
for policy in oobleck varuna-like bamboo-like; do
  "$LOOM" replay "$CONFIG" --trace "$TRACE" --policy "$policy" --backend evaluator \
    --notice 120s -q --out "$RUNS/$policy" > "$RUNS/$policy.log"
  grep "average throughput" "$RUNS/$policy.log" | sed "s/^/$policy: /"
  dirs+=("$RUNS/$policy")
done
mkdir -p "$OUT"
"$PY" "$ROOT/analysis/replay_plot.py" "${dirs[@]}" -o "$OUT" --window 5min \
  --title "EC2 p3 spot trace, $(basename "$CONFIG" .toml), $MODE"
echo "wrote $OUT/{replay_throughput.png, replay_breakdown.png}"
