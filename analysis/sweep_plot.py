#!/usr/bin/python3
"""Plots a `loom sweep` results.csv (or `loom sim --schedulers` schedulers.csv).

    sweep_plot.py results.csv --x schedule.microbatches --y iteration_time_s --hue scheduler
    sweep_plot.py results.csv --x schedule.microbatches --y throughput_samples_per_s \
        --hue parallel.pp --kind heatmap
    sweep_plot.py results.csv --x workload.tokens.text --y tokens_per_s_per_gpu \
        --hue parallel.cp+parallel.tp+parallel.pp --kind heatmap

The kind follows the axis type unless --kind says otherwise: a numeric --x gives one line
per --hue value; a categorical --x gives grouped bars; `heatmap` puts --x on the columns,
--hue on the rows and --y as the colour. Only rows with status ok are drawn. Rows that
differ in other columns are averaged (the title says over how many); `--where KEY=VALUE`
(repeatable) picks a slice instead. The PNG appears only once complete, and the same CSV
gives the same bytes.
"""

import argparse
import csv
import os
import sys
from collections import defaultdict

import loom_plot as lp


def build_parser():
    p = argparse.ArgumentParser(
        prog="sweep_plot.py", description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 ok, 2 bad input (the message names the file and column).")
    p.add_argument("csv", metavar="RESULTS_CSV")
    p.add_argument("--x", required=True, help="column on the x axis (an axis of the study)")
    p.add_argument("--y", default="iteration_time_s", help="metric column (default %(default)s)")
    p.add_argument("--hue", help="column drawn as separate lines / bar groups / heatmap rows; "
                   "several joined by '+' (parallel.cp+parallel.tp) label each combination")
    p.add_argument("--kind", choices=["auto", "line", "bar", "heatmap"], default="auto")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep only rows whose KEY column equals VALUE (repeatable)")
    p.add_argument("--out", help="PNG to write (default: next to the CSV, named after --x/--y)")
    p.add_argument("--title")
    return p


def fail(message):
    print("sweep_plot.py: error: " + message, file=sys.stderr)
    sys.exit(2)


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def load(path, args):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if not rows:
        fail(f"{path}: no rows")
    columns = rows[0].keys()
    hue_columns = args.hue.split("+") if args.hue else []
    for col in [args.x, args.y] + hue_columns:
        if col not in columns:
            fail(f"{path}:1: no column '{col}' (columns: {', '.join(columns)})")
    if len(hue_columns) > 1:  # one label per combination: "cp=2 tp=8"
        for r in rows:
            r[args.hue] = " ".join(f"{c.split('.')[-1]}={r[c]}" for c in hue_columns)
    for w in args.where:
        key, _, value = w.partition("=")
        if key not in columns:
            fail(f"{path}:1: --where: no column '{key}'")
        rows = [r for r in rows if r[key] == value]
    ok = [r for r in rows if r.get("status", "ok") == "ok" and number(r[args.y]) is not None]
    if not ok:
        fail(f"{path}: no ok rows to plot (after --where)")
    return ok


def sort_key(values):
    nums = [number(v) for v in values]
    if all(n is not None for n in nums):
        return sorted(values, key=float)
    return sorted(values)


def aggregate(rows, args):
    """{(x, hue): mean y} and the largest number of rows averaged into one value."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r[args.x], r[args.hue] if args.hue else "")].append(float(r[args.y]))
    means = {k: sum(v) / len(v) for k, v in groups.items()}
    return means, max(len(v) for v in groups.values())


def log_axis(values):
    """Whether numeric x values spread evenly on a log axis: counts swept by doubling
    (microbatches 8..128) span a factor of 8 or more and are all positive."""
    return min(values) > 0 and max(values) / min(values) >= 8


def draw(rows, args, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means, averaged = aggregate(rows, args)
    xs = sort_key({x for x, _ in means})
    hues = sort_key({h for _, h in means})
    kind = args.kind
    if kind == "auto":
        kind = "line" if all(number(x) is not None for x in xs) and len(xs) > 1 else "bar"
    wide = kind == "bar" and len(xs) * len(hues) > 12
    fig, ax = plt.subplots(figsize=(min(16.0, 0.35 * len(xs) * len(hues)) if wide else 6.4, 4.2))
    if kind == "heatmap":
        grid = [[means.get((x, h), float("nan")) for x in xs] for h in hues]
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis")
        ax.set_xticks(range(len(xs)), xs)
        ax.set_yticks(range(len(hues)), hues)
        ax.set_ylabel(args.hue or "")
        fig.colorbar(im, ax=ax, label=args.y)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v == v:
                    ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7, color="w")
    elif kind == "line":
        # Lines that coincide (schedulers with equal times) stay visible: each hue has its
        # own marker and dash, drawn a little thinner than the one before it.
        styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]
        for k, h in enumerate(hues):
            pts = [(float(x), means[(x, h)]) for x in xs if (x, h) in means]
            marker, dash = styles[k % len(styles)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, linestyle=dash,
                    linewidth=max(0.8, 2.4 - 0.3 * k), markersize=max(3.0, 7.0 - 0.6 * k),
                    label=h or None)
        values = [float(x) for x in xs]
        if log_axis(values):
            ax.set_xscale("log", base=2)
            ax.set_xticks(values, [x for x in xs])
            ax.minorticks_off()
        ax.set_ylabel(args.y)
    else:
        width = 0.8 / max(1, len(hues))
        for k, h in enumerate(hues):
            ax.bar([i + k * width - 0.4 + width / 2 for i in range(len(xs))],
                   [means.get((x, h), 0) for x in xs], width, label=h or None)
        ax.set_xticks(range(len(xs)), xs, rotation=30 if len(xs) > 6 else 0, ha="right"
                      if len(xs) > 6 else "center")
        ax.set_ylabel(args.y)
    ax.set_xlabel(args.x)
    if args.hue and kind != "heatmap":
        ax.legend(title=args.hue, fontsize=8)
    title = args.title or f"{args.y} by {args.x}" + (f" and {args.hue}" if args.hue else "")
    if averaged > 1:
        title += f" (mean of {averaged} rows per value)"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    lp.save_png(fig, out)  # atomic, and the same bytes for the same CSV
    plt.close(fig)


def main(argv=None):
    args = build_parser().parse_args(argv)
    rows = load(args.csv, args)
    out = args.out or os.path.join(
        os.path.dirname(os.path.abspath(args.csv)),
        f"{args.y}-by-{args.x}".replace("/", "_") + ".png")
    draw(rows, args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
