#!/usr/bin/env bash
# Scale benchmark of the two backends: one 1F1B iteration of configs/bench/pp16-dp64.toml
# (PP 16, 128 microbatches, 8 H100s per node) swept from 1,024 to 65,536 GPUs by growing
# the data-parallel degree, on the evaluator and on SimGrid, folded (the default: identical
# replicas simulated once, core/replica_fold.hpp) and, up to UNFOLDED_MAX GPUs, unfolded.
#
#   bash bench/run_scale.sh [BUILD_DIR] [OUT_DIR] [UNFOLDED_MAX] [FABRIC] [REPEAT]
#
# FABRIC: star (default) or fat-tree (three tiers, pods of 1,024 GPUs, the core 1:7:
# analysis/scale_plot.py). REPEAT (default 1): runs per point, the median kept (this
# virtual machine's speed drifts by +-20 % between runs of minutes).
#
# Prints a Markdown table (end-to-end wall of the whole `loom sim --bench` process, the
# planning and backend parts, peak RSS; then, up to UNFOLDED_MAX, unfolded SimGrid runs that
# write every output file as a user's run does, `--no-plot`) and writes OUT_DIR/scale.json
# and OUT_DIR/scale.png (time and resident memory against GPUs, log-log, with the fitted
# exponent per series).
set -euo pipefail
build=${1:-build}
out=${2:-out/bench-scale}
unfolded_max=${3:-4096}
fabric=${4:-star}
repeat=${5:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
exec /usr/bin/python3 "$root/analysis/scale_plot.py" --loom "$build/cli/loom" \
  --config "$root/configs/bench/pp16-dp64.toml" --out "$out" --unfolded-max "$unfolded_max" --fabric "$fabric" \
  --repeat "$repeat"
