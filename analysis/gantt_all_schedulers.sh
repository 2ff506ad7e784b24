#!/usr/bin/env bash
# One Gantt PNG per registered scheduler on one MLLM config (default: MLLM-MMM of
# dissertation Table 3.2), so the schedules can be compared by eye:
#   bash analysis/gantt_all_schedulers.sh [CONFIG] [OUT_DIR]
# writes OUT_DIR/gantt-<scheduler>.png (and each run's files under OUT_DIR/<scheduler>/).
# Environment: LOOM (the binary; default build/cli/loom), LOOM_PYTHON (a python3 with
# matplotlib; default /usr/bin/python3), BACKEND (simgrid | evaluator; default simgrid).
# The per-module schedulers (hetero-*) need [parallel.modules] layouts, which the paper
# configs do not carry; this script passes the ones listed below for the paper configs
# (24 GPUs). A scheduler that cannot run on the config is reported and skipped.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOOM="${LOOM:-$ROOT/build/cli/loom}"
PY="${LOOM_PYTHON:-/usr/bin/python3}"
BACKEND="${BACKEND:-simgrid}"
CONFIG="${1:-$ROOT/configs/paper/cornstarch-mmm.toml}"
OUT="${2:-out/gantt-all}"

extra_args() {
  case "$1" in
    hetero-colocated)  # every module on all 24 GPUs, LLM TP 2 x DP 12, encoders TP 2 x DP 12
      echo "--set schedule.microbatch_size=6 --set schedule.microbatches=4" \
           "--set parallel.modules.llm.tp=2 --set parallel.modules.llm.dp=12" \
           "--set parallel.modules.vision.tp=2 --set parallel.modules.vision.dp=12" \
           "--set parallel.modules.audio.tp=2 --set parallel.modules.audio.dp=12" ;;
    hetero-noncolocated)  # encoders on GPUs 0-3 and 4-7, the LLM (PP 4) on 8-23
      echo "--set parallel.modules.vision.tp=2 --set parallel.modules.vision.dp=2" \
           "--set parallel.modules.vision.gpus=0-3" \
           "--set parallel.modules.audio.tp=2 --set parallel.modules.audio.dp=2" \
           "--set parallel.modules.audio.gpus=4-7" \
           "--set parallel.modules.llm.tp=2 --set parallel.modules.llm.pp=4" \
           "--set parallel.modules.llm.dp=2 --set parallel.modules.llm.gpus=8-23" ;;
  esac
}

[ -x "$LOOM" ] || { echo "gantt_all_schedulers: $LOOM not found (build first, or set LOOM)" >&2; exit 2; }
mkdir -p "$OUT"
status=0
for s in $("$LOOM" schedulers | cut -f1); do
  # shellcheck disable=SC2046
  if ! "$LOOM" sim "$CONFIG" --backend "$BACKEND" --no-plot -q --out "$OUT/$s" \
       --set "schedule.name=$s" $(extra_args "$s") > "$OUT/$s.log" 2>&1; then
    echo "skipped $s: $(tail -1 "$OUT/$s.log")" >&2
    status=1
    continue
  fi
  "$PY" "$ROOT/analysis/gantt.py" "$OUT/$s" -o "$OUT/gantt-$s.png" &&
    echo "$OUT/gantt-$s.png  ($(grep 'iteration time' "$OUT/$s.log" | tr -s ' '))"
done
exit $status
