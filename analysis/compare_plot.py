#!/usr/bin/python3
"""Prediction vs measurement: two timelines of one schedule on one time axis.

`loom compare PRED_DIR MEAS_DIR` runs this after printing the per-operation errors. The
predicted run (`loom sim`) is drawn above, the measured one (`loom exec`) below, one row
per rank each, compute boxes colored by kind (lp.KIND_COLORS), so a stage that runs
longer than predicted shows as boxes that drift right down the page.
"""

import argparse
import os
import sys

import loom_plot as lp  # first: it selects the headless Agg backend
from matplotlib.patches import Patch  # noqa: E402

FIG_WIDTH_IN = 12.0
ROW_IN = 0.32


def _panel(ax, timeline, metrics, x_max_ms, label):
    ranks = timeline.ranks()
    kinds = timeline.kind
    for row, rank in enumerate(ranks):
        on_rank = timeline.rank == rank
        for kind in lp.kind_order(set(kinds[on_rank])):
            if not lp.is_compute(kind):
                continue
            sel = on_rank & (kinds == kind)
            starts = timeline.start_s[sel] * 1e3
            widths = (timeline.end_s[sel] - timeline.start_s[sel]) * 1e3
            ax.broken_barh(list(zip(starts, widths)), (row - 0.4, 0.8),
                           facecolors=lp.kind_color(kind), edgecolor="none")
    iteration = (metrics or {}).get("iteration_time_s", timeline.end_time_s())
    ax.set_xlim(0, x_max_ms)
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks], fontsize=8)
    run = lp.describe_run(metrics)
    ax.set_title(f"{label}: {run}, iteration {iteration * 1e3:.3f} ms", fontsize=9, loc="left")


def render_compare(pred, pred_metrics, meas, meas_metrics):
    """Returns the Figure: predicted above, measured below, same x axis (ms)."""
    rows = len(pred.ranks()) + len(meas.ranks())
    height = 1.4 + rows * ROW_IN + 0.6
    fig = lp.Figure(figsize=(FIG_WIDTH_IN, height), dpi=lp.DPI)
    x_max = 1.01e3 * max(pred.end_time_s(), meas.end_time_s(),
                         (pred_metrics or {}).get("iteration_time_s", 0),
                         (meas_metrics or {}).get("iteration_time_s", 0), 1e-6)
    top, bottom = fig.subplots(2, 1, sharex=True,
                               height_ratios=[max(1, len(pred.ranks())), max(1, len(meas.ranks()))])
    _panel(top, pred, pred_metrics, x_max, "predicted")
    _panel(bottom, meas, meas_metrics, x_max, "measured")
    bottom.set_xlabel("time (ms)")
    handles = [Patch(color=lp.kind_color(k), label=lp.KIND_LABELS.get(k, k))
               for k in lp.kind_order(set(pred.kind) | set(meas.kind)) if lp.is_compute(k)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.09, right=0.98, top=1 - 0.45 / height, bottom=0.9 / height,
                        hspace=0.45)
    return fig


def build_parser():
    p = argparse.ArgumentParser(prog="compare_plot.py", description=__doc__.splitlines()[0])
    p.add_argument("pred_dir", help="run directory of the prediction (loom sim --out)")
    p.add_argument("meas_dir", help="run directory of the measurement (loom exec --out)")
    p.add_argument("-o", "--output", required=True, help="PNG to write")
    p.add_argument("--quiet", action="store_true", help="do not print the written path")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    runs = []
    for d in (args.pred_dir, args.meas_dir):
        runs.append(lp.load_timeline(os.path.join(d, "timeline.csv")))
        runs.append(lp.load_metrics(os.path.join(d, "metrics.json"), required=False))
    lp.save_png(render_compare(*runs), args.output)
    if not args.quiet:
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(lp.run_cli("compare_plot.py", main, sys.argv[1:]))
