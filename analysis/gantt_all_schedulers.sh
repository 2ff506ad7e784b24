#!/usr/bin/env bash
# One Gantt PNG per registered scheduler on one MLLM config (default: MLLM-MMM of
# dissertation Table 3.2), so the schedules can be compared by eye:
#   bash analysis/gantt_all_schedulers.sh [CONFIG] [OUT_DIR]
# writes OUT_DIR/gantt-<scheduler>.png (and each run's files under OUT_DIR/<scheduler>/).
# Environment: LOOM (the binary; default build/cli/loom), LOOM_PYTHON (a python3 with
# matplotlib; default /usr/bin/python3), BACKEND (simgrid | evaluator; default simgrid),
# LOOM_SET (space-separated KEY=VALUE overrides for every run, e.g. schedule.microbatches=12
# so that dualpipe-v's m >= 2 pp holds).
# Every scheduler runs with the config as it is (per-module schedulers derive their layouts
# from the single layout, core/layout.hpp). One that cannot run, or whose chart fails, is
# reported on stderr and the script exits 1 after trying the others.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOOM="${LOOM:-$ROOT/build/cli/loom}"
PY="${LOOM_PYTHON:-/usr/bin/python3}"
BACKEND="${BACKEND:-simgrid}"
CONFIG="${1:-$ROOT/configs/paper/cornstarch-mmm.toml}"
OUT="${2:-out/gantt-all}"

[ -x "$LOOM" ] || { echo "gantt_all_schedulers: $LOOM not found (build first, or set LOOM)" >&2; exit 2; }
mkdir -p "$OUT"
status=0
sets=()
for kv in ${LOOM_SET:-}; do sets+=(--set "$kv"); done
for s in $("$LOOM" schedulers | cut -f1); do
  if ! "$LOOM" sim "$CONFIG" --backend "$BACKEND" --no-plot -q --force --out "$OUT/$s" \
       "${sets[@]}" --set "schedule.name=$s" > "$OUT/$s.log" 2>&1; then
    echo "skipped $s: $(tail -1 "$OUT/$s.log")" >&2
    status=1
    continue
  fi
  # A chart that fails to draw is a failure too (the exit status says "not all PNGs").
  if "$PY" "$ROOT/analysis/gantt.py" "$OUT/$s" -o "$OUT/gantt-$s.png" >> "$OUT/$s.log" 2>&1 &&
     [ -s "$OUT/gantt-$s.png" ]; then
    echo "$OUT/gantt-$s.png  ($(grep 'iteration time' "$OUT/$s.log" | tr -s ' '))"
  else
    echo "no chart for $s: $(tail -1 "$OUT/$s.log")" >&2
    status=1
  fi
done
exit $status
