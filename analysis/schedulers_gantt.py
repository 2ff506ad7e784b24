#!/usr/bin/python3
"""Draws the Gantt grid of `loom sim CONFIG --schedulers ... --out DIR`: one row per
scheduler (fastest first, from DIR/schedulers.csv), each showing the compute operations
(F, B, I, W) of every rank of DIR/timelines/<scheduler>.csv on one shared time axis, so
the schedules' shapes and lengths compare at a glance. Writes DIR/schedulers_gantt.png.

Exit codes: 0 ok, 2 malformed input (the message names file and line), 1 internal error.
"""

import argparse
import csv
import os

import loom_plot as lp

MAX_RANKS_PER_ROW = 16  # more ranks: evenly spaced ones (the row title says so)


def build_parser():
    p = argparse.ArgumentParser(prog="schedulers_gantt.py", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", metavar="DIR", help="the directory `loom sim --schedulers` wrote")
    p.add_argument("--out", help="PNG to write (default DIR/schedulers_gantt.png)")
    return p


def ok_schedulers(path):
    """(scheduler, iteration_time_s) of the ok rows, fastest first."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise lp.LoomInputError(path, e.strerror)
    ok = [(r["scheduler"], float(r["iteration_time_s"])) for r in rows if r["status"] == "ok"]
    if not ok:
        raise lp.LoomInputError(path, "no scheduler ran (no ok rows)")
    return sorted(ok, key=lambda s: (s[1], s[0]))


def timeline_file(entry):
    """The file `loom sim --schedulers` writes an entry's timeline to: its options'
    ':' and '=' as '_' and '-' (app/sweep/scheduler_table.cpp, entry_file_name)."""
    return entry.replace(":", "_").replace("=", "-") + ".csv"


def draw(run_dir, out):
    schedulers = ok_schedulers(os.path.join(run_dir, "schedulers.csv"))
    timelines = [lp.load_timeline(os.path.join(run_dir, "timelines", timeline_file(name)))
                 for name, _ in schedulers]
    t_end_ms = max(t.end_time_s() for t in timelines) * 1e3
    heights = [min(len(t.ranks()), MAX_RANKS_PER_ROW) for t in timelines]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(schedulers), 1, sharex=True, squeeze=False,
                             figsize=(10, 0.9 + sum(0.22 * h + 0.45 for h in heights)),
                             gridspec_kw={"height_ratios": [h + 2 for h in heights]})
    kinds_seen = set()
    for ax, (name, t_s), tl in zip(axes[:, 0], schedulers, timelines):
        ranks = lp.select_ranks(tl.ranks(), MAX_RANKS_PER_ROW)
        kind = tl.kind
        for row, rank in enumerate(ranks):
            mask = (tl.rank == rank)
            for k in lp.COMPUTE_KINDS:
                sel = mask & (kind == k)
                if not sel.any():
                    continue
                kinds_seen.add(k)
                starts, ends = tl.start_s[sel] * 1e3, tl.end_s[sel] * 1e3
                ax.broken_barh(list(zip(starts, ends - starts)), (row - 0.4, 0.8),
                               facecolors=lp.kind_color(k), linewidth=0)
        ax.set_ylim(len(ranks) - 0.5, -0.5)
        ax.set_yticks(range(len(ranks)), [str(r) for r in ranks], fontsize=6)
        note = "" if len(ranks) == len(tl.ranks()) else f", {len(ranks)} of {len(tl.ranks())} ranks"
        ax.set_title(f"{name}: {t_s * 1e3:.3f} ms{note}", fontsize=8, loc="left")
        ax.set_xlim(0, t_end_ms)
    axes[-1, 0].set_xlabel("time (ms)")
    fig.legend(handles=[Patch(color=lp.kind_color(k), label=lp.KIND_LABELS.get(k, k))
                        for k in lp.COMPUTE_KINDS if k in kinds_seen],
               loc="upper right", ncol=4, fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    lp.save_png(fig, out)
    plt.close(fig)


def main(argv=None):
    args = build_parser().parse_args(argv)
    draw(args.run_dir, args.out or os.path.join(args.run_dir, "schedulers_gantt.png"))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(lp.run_cli("schedulers_gantt.py", main, sys.argv[1:]))
