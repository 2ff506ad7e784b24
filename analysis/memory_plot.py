#!/usr/bin/python3
"""Allocated GPU memory over one simulated iteration, per rank.

memory.csv is a step function per rank (each row holds until the rank's next row), so it
is drawn with steps, never interpolated: a straight line between two samples would show
memory that was never allocated. By default: one line per *distinct* rank (identical
ranks, e.g. data-parallel replicas, share one labeled line), over the peak rank's memory
split into parameters, gradients, optimizer state and activations, which shows why it
peaks where it does; the y axis fits the data, and a GPU capacity far above it is named
rather than drawn. With --rank, one rank's split alone.
"""

import argparse
import os
import sys

import numpy as np

import loom_plot as lp

GIB = float(1 << 30)
FIG_SIZE_IN = (11.0, 5.2)
MARGINS_IN = dict(left_in=0.75, right_in=1.9, top_in=0.4, bottom_in=0.6)  # legend at right
LEGEND_MAX_LINES = 16   # beyond this a legend hides the plot: use a colorbar instead
PART_COLORS = {
    "parameters_bytes": "#8172B3",
    "gradients_bytes": "#DA8BC3",
    "optimizer_bytes": "#CCB974",
    "activations_bytes": "#64B5CD",
}


def _extend(times, values, t_end):
    """Step points (ms, GiB) with the last value held until t_end."""
    x = np.append(times, max(t_end, times[-1])) * 1e3
    y = np.append(values, values[-1]) / GIB
    return x, y


def _end_time(memory, metrics, t_end):
    """Where the x axis ends: the iteration's end, or at least the last sample."""
    candidates = [float(memory.time_s.max()), t_end or 0.0,
                  (metrics or {}).get("iteration_time_s", 0.0)]
    end = max(candidates)
    return end if end > 0 else 1e-3


def _rank_colors(ranks):
    """Distinct colors for a few ranks; an ordered colormap for many (with a colorbar)."""
    from matplotlib import colormaps

    if len(ranks) <= 10:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in range(len(ranks))]
    cmap = colormaps["viridis"]
    return [cmap(i / (len(ranks) - 1)) for i in range(len(ranks))]


def distinct_ranks(memory, ranks):
    """Ranks grouped by identical memory over time (every part), in rank order: one line
    per group instead of identical lines drawn on top of each other."""
    groups = {}
    for r in ranks:
        key = tuple(np.concatenate([np.asarray(memory.series(r, c)[k]).ravel()
                                    for c in lp.MEMORY_PARTS for k in (0, 1)]).tolist())
        groups.setdefault(key, []).append(r)
    return sorted(groups.values())


def group_label(group):
    """"rank 3", "ranks 0, 4 (2 identical)", "ranks 0, 4, 8, ... (12 identical)"."""
    if len(group) == 1:
        return f"rank {group[0]}"
    names = ", ".join(str(r) for r in group[:3]) + (", ..." if len(group) > 3 else "")
    return f"ranks {names} ({len(group)} identical)"


def _draw_totals(ax, memory, groups, t_end):
    """One step line of total_bytes per group of identical ranks; returns (peak GiB, its
    rank, its time ms)."""
    peak = (-1.0, None, 0.0)
    for group, color in zip(groups, _rank_colors(groups)):
        times, values = memory.series(group[0])
        x, y = _extend(times, values, t_end)
        ax.step(x, y, where="post", color=color, linewidth=1.3, label=group_label(group))
        i = int(np.argmax(y))
        if y[i] > peak[0]:
            peak = (float(y[i]), group[0], float(x[i]))
    return peak


def _draw_peak_parts(ax, memory, rank, t_end):
    """The peak rank's memory stacked by kind, faded behind the lines; kinds that stay zero
    (gradients of a frozen rank) get no legend entry."""
    base = None
    for part in lp.MEMORY_PARTS:
        times, values = memory.series(rank, part)
        x, y = _extend(times, values, t_end)
        lower = np.zeros_like(y) if base is None else base
        if y.max() > 0:
            ax.fill_between(x, lower, lower + y, step="post", color=PART_COLORS[part],
                            alpha=0.45, linewidth=0,
                            label=f"rank {rank}: {part.replace('_bytes', '')}")
        base = lower + y


def _draw_parts(ax, memory, rank, t_end):
    """Stacked step areas of one rank's memory by kind; returns its peak like _draw_totals."""
    base = None
    for part in lp.MEMORY_PARTS:
        times, values = memory.series(rank, part)
        x, y = _extend(times, values, t_end)
        lower = np.zeros_like(y) if base is None else base
        upper = lower + y
        if y.max() > 0:  # no legend entry for a kind that never occurs
            ax.fill_between(x, lower, upper, step="post", color=PART_COLORS[part], linewidth=0,
                            label=part.replace("_bytes", ""))
        base = upper
    times, values = memory.series(rank)
    x, y = _extend(times, values, t_end)
    ax.step(x, y, where="post", color="black", linewidth=1.0, label="total")
    i = int(np.argmax(y))
    return float(y[i]), rank, float(x[i])


def _title(metrics, shown, total, rank):
    """What the plot shows, which run it is from and whether ranks are left out."""
    run = lp.describe_run(metrics)
    head = f"Memory of rank {rank} by kind" if rank is not None else "Allocated memory per rank"
    facts = [run] if run else []
    note = lp.rank_subset_note(shown, total)
    if note and rank is None:
        facts.append(note)
    return head + (" — " + " | ".join(facts) if facts else "")


def render_memory(memory, metrics=None, ranks=None, rank=None, capacity_gib=None, t_end=None):
    """Draws the memory plot and returns the Figure (not saved).

    ranks: ranks to draw (None: at most lp.MAX_PLOTTED_RANKS evenly spaced ones);
    rank: draw only this rank, stacked by kind; capacity_gib: a dashed capacity line;
    t_end: seconds to hold the last sample until (default: the iteration's end).
    """
    all_ranks = memory.ranks()
    t_end = _end_time(memory, metrics, t_end)
    fig, ax = lp.new_figure(*FIG_SIZE_IN, **MARGINS_IN)
    groups = None
    if rank is not None:
        shown = [rank]
        peak = _draw_parts(ax, memory, rank, t_end)
    else:
        shown = lp.select_ranks(all_ranks) if ranks is None else sorted(ranks)
        groups = distinct_ranks(memory, shown)
        peak = _draw_totals(ax, memory, groups, t_end)
        _draw_peak_parts(ax, memory, peak[1], t_end)

    top = peak[0]
    if capacity_gib is not None and capacity_gib <= 1.5 * peak[0]:
        ax.axhline(capacity_gib, color="#C44E52", linestyle="--", linewidth=1.2,
                   label=f"capacity {capacity_gib:.1f} GiB")
        top = max(top, capacity_gib)
    elif capacity_gib is not None:  # drawn, it would press the data flat at the bottom
        ax.text(0.99, 0.98, f"GPU capacity {capacity_gib:.1f} GiB (off the scale)",
                transform=ax.transAxes, ha="right", va="top", fontsize=8, color="#C44E52")
    ax.plot([peak[2]], [peak[0]], marker="v", color="black", markersize=6, linestyle="none")
    ax.annotate(f"peak {peak[0]:.2f} GiB (rank {peak[1]})", (peak[2], peak[0]),
                textcoords="offset points", xytext=(6, 6), fontsize=8)

    ax.set_xlim(0, t_end * 1e3 * 1.01)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("allocated memory (GiB)")
    ax.grid(color="#E0E0E0", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(_title(metrics, len(shown), len(all_ranks), rank), fontsize=10)
    _legend(fig, ax, shown if groups is None else [g[0] for g in groups], rank is not None)
    return fig


def _legend(fig, ax, shown, stacked):
    """A legend for few lines; for many ranks, a colorbar mapping color to rank."""
    if stacked or len(shown) <= LEGEND_MAX_LINES:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        return
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    mappable = ScalarMappable(Normalize(0, len(shown) - 1), colormaps["viridis"])
    bar = fig.colorbar(mappable, cax=fig.add_axes(_colorbar_box(fig, ax)))
    ticks = sorted({0, len(shown) // 2, len(shown) - 1})
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"rank {shown[i]}" for i in ticks])


def _colorbar_box(fig, ax):
    """A slim bar in the right margin, where the legend would otherwise go."""
    box = ax.get_position()
    width = 0.18 / fig.get_figwidth()
    return [box.x1 + 0.15 / fig.get_figwidth(), box.y0, width, box.height]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="memory_plot.py",
        description="Plot allocated memory over time from a `loom sim` run's memory.csv: "
                    "total per rank, or one rank split by kind.",
        epilog="Exit codes: 0 ok, 2 malformed input (the message names file and line), "
               "1 internal error.")
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="directory with memory.csv (and optionally metrics.json)")
    parser.add_argument("-o", "--output", metavar="OUT.png",
                        help="where to write the PNG (default: RUN_DIR/memory.png)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--rank", type=int, metavar="R",
                       help="plot only rank R, as stacked parameters/gradients/optimizer/"
                            "activations")
    group.add_argument("--ranks", metavar="LIST",
                       help="ranks to plot, e.g. 0,1,5 or 0-3 (default: all, or "
                            f"{lp.MAX_PLOTTED_RANKS} evenly spaced ones incl. first and last)")
    parser.add_argument("--capacity-gib", type=float, metavar="GIB",
                        help="draw the GPU memory capacity as a dashed line, e.g. 80")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    memory = lp.load_memory(os.path.join(args.run_dir, "memory.csv"))
    metrics = lp.load_metrics(os.path.join(args.run_dir, "metrics.json"), required=False)
    ranks = lp.parse_rank_list(args.ranks, memory.ranks()) if args.ranks else None
    if args.rank is not None:
        lp.parse_rank_list(str(args.rank), memory.ranks(), path="--rank")
    fig = render_memory(memory, metrics, ranks=ranks, rank=args.rank,
                        capacity_gib=args.capacity_gib)
    out = args.output or os.path.join(args.run_dir, "memory.png")
    lp.save_png(fig, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(lp.run_cli("memory_plot.py", main, sys.argv[1:]))
