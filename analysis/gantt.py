#!/usr/bin/python3
"""Gantt chart of one simulated iteration: what every rank computes and sends, and when.

One row per rank: a compute lane (F/B/I/W boxes, colored by kind, numbered by microbatch
where they are wide enough) and under it a thin communication lane (send, recv,
collectives, in greys). Bubbles are the white gaps in the compute lanes.
"""

import argparse
import os
import sys
from dataclasses import dataclass, replace

import numpy as np

import loom_plot as lp

MAX_BOXES = 200_000      # above this, lanes are drawn as pixel-resolution images instead
MAX_LABELS = 5_000       # text artists are slow to draw; a bound keeps huge runs fast
HATCH_MAX_BOXES = 5_000  # hatching thousands of slivers costs time and shows nothing
FIG_WIDTH_IN = 12.0
MARGINS_IN = dict(left_in=1.1, right_in=0.25, top_in=0.5)  # rank labels; -; 2-line title
LEGEND_ROW_IN = 0.22
AXES_WIDTH_IN = FIG_WIDTH_IN - MARGINS_IN["left_in"] - MARGINS_IN["right_in"]
X_MARGIN = 1.01          # a sliver of room right of the last box, so its edge shows
LABEL_FONT_PT = 7.0
DENSE_ROW_PX = 6         # below this many pixels per rank, images show compute only
CHAR_WIDTH_EM = 0.62     # DejaVu Sans digits are about 0.62 em wide


@dataclass
class Boxes:
    """The boxes to draw, as parallel arrays (times in ms, indices rather than names)."""

    row: np.ndarray         # index into the plotted ranks
    kind: np.ndarray        # index into kind_names
    module: np.ndarray      # hatch index: 0 (solid) unless modules are told apart
    microbatch: np.ndarray  # -1: none, no label
    start_ms: np.ndarray
    end_ms: np.ndarray
    kind_names: list        # drawn kinds, in legend order
    modules: list           # module names shown in the legend ([] when not hatched)

    def __len__(self):
        return len(self.row)


@dataclass
class Geometry:
    """Where things go: computed once so boxes, labels and images agree."""

    rows: int
    compute_lane: tuple     # (y offset from the row's center, height)
    comm_lane: tuple        # same, or None when communication is not drawn
    axes_height_in: float
    x_max_ms: float

    @property
    def ms_per_px(self):
        return self.x_max_ms / (AXES_WIDTH_IN * lp.DPI)

    @property
    def px_per_row(self):
        return self.axes_height_in * lp.DPI / self.rows


def _geometry(rows, show_comm, t_end_s):
    """Lane placement and axes size: tall enough to read each row, at most a page."""
    per_row = 0.42 if show_comm else 0.32
    if show_comm:
        compute, comm = (-0.40, 0.62), (0.26, 0.16)
    else:
        compute, comm = (-0.40, 0.80), None
    return Geometry(rows=rows, compute_lane=compute, comm_lane=comm,
                    axes_height_in=min(0.3 + rows * per_row, 16.0),
                    x_max_ms=t_end_s * 1e3 * X_MARGIN)


def _legend_rows(entries):
    return 1 if entries <= 8 else 2


def _text_color(hex_color):
    """Black on light boxes, white on dark ones, by relative luminance."""
    r, g, b = (int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _rgb(hex_color):
    return np.array([int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)])


def _title(metrics, timeline, shown, total, notes=()):
    """Two lines: what ran, then the numbers that summarise it and what is left out."""
    run = lp.describe_run(metrics)
    head = "Pipeline schedule" + (f": {run}" if run else "")
    iteration = (metrics or {}).get("iteration_time_s", timeline.end_time_s())
    facts = [f"iteration {iteration * 1e3:.3f} ms"]
    if metrics and "bubble_fraction" in metrics:
        facts.append(f"bubble {metrics['bubble_fraction'] * 100:.1f}%")
    layout = (metrics or {}).get("layout")
    if layout:
        facts.append(f"pp {layout['pp']} x dp {layout['dp']} x tp {layout['tp']}")
    if metrics and "microbatches" in metrics:
        facts.append(f"{metrics['microbatches']} microbatches")
    note = lp.rank_subset_note(shown, total)
    if note:
        facts.append(note)
    return head + "\n" + " | ".join(facts + list(notes))


# ----------------------------------------------------------------------------- data


def select_boxes(timeline, ranks, show_comm):
    """The operations to draw, on the given ranks, with kinds and modules as indices.

    Kinds and modules stay integer codes throughout: with 10^6 operations, comparing
    strings would take longer than drawing.
    """
    compute_codes = timeline.codes_of(lp.COMPUTE_KINDS)
    mask = np.isin(timeline.rank, ranks)
    if not show_comm:
        mask &= np.isin(timeline.kind_code, compute_codes)
    code = timeline.kind_code[mask]
    kind_names = lp.kind_order({timeline.kind_names[c] for c in np.unique(code)})
    remap = np.zeros(len(timeline.kind_names), dtype=np.int64)
    for i, name in enumerate(kind_names):
        remap[timeline.kind_names.index(name)] = i
    boxes = Boxes(row=np.searchsorted(np.asarray(ranks), timeline.rank[mask]),
                  kind=remap[code], module=np.zeros(len(code), dtype=np.int64),
                  microbatch=timeline.microbatch[mask], start_ms=timeline.start_s[mask] * 1e3,
                  end_ms=timeline.end_s[mask] * 1e3, kind_names=kind_names, modules=[])
    # Modules with compute (codes are numbered by first appearance) get hatches.
    is_compute = np.isin(code, compute_codes)
    module_codes = np.unique(timeline.module_code[mask][is_compute])
    if 1 < len(module_codes) and len(code) <= HATCH_MAX_BOXES:
        hatch = np.zeros(len(timeline.module_names), dtype=np.int64)
        hatch[module_codes] = np.arange(len(module_codes))
        boxes.module = np.where(is_compute, hatch[timeline.module_code[mask]], 0)
        boxes.modules = [timeline.module_names[c] for c in module_codes]
    return boxes


def lane_occupancy(lane, start_px, end_px, lanes, width_px):
    """How much of each pixel column each lane's intervals cover: (lanes, width_px) array.

    Exact for fractional pixels and O(boxes + lanes * width): with
    R(x) = sum_i max(0, x - start_i) - max(0, x - end_i), the time covered left of x,
    a pixel's coverage is R(right edge) - R(left edge); R at every integer edge comes
    from cumulative counts and sums of the interval ends falling left of it.
    """
    edges = width_px + 1

    def ramp(points):  # sum_i max(0, j - p_i) for every lane and every edge j
        first_edge = np.clip(np.floor(points).astype(np.int64) + 1, 0, edges)
        index = lane * (edges + 1) + first_edge
        size = lanes * (edges + 1)
        count = np.bincount(index, minlength=size).reshape(lanes, edges + 1)[:, :edges]
        total = np.bincount(index, weights=points, minlength=size).reshape(lanes, edges + 1)
        return np.arange(edges) * count.cumsum(axis=1) - total[:, :edges].cumsum(axis=1)

    covered = ramp(start_px) - ramp(end_px)
    return np.diff(covered, axis=1)


def aggregate_image(boxes, geometry):
    """An RGBA image of all lanes at screen resolution, colors blended by coverage.

    Used when there are too many boxes to draw one by one: each pixel gets the mix of
    the kinds that ran during it, so density and bubbles stay visible.
    """
    width = int(round(AXES_WIDTH_IN * lp.DPI))
    height = max(int(round(geometry.axes_height_in * lp.DPI)), 1)
    compute = np.array([lp.is_compute(k) for k in boxes.kind_names])[boxes.kind]
    lane = boxes.row * 2 + np.where(compute, 0, 1)
    lanes = geometry.rows * 2
    rgb = np.zeros((lanes, width, 3), dtype=np.float32)  # float32: 1,000 ranks stay small
    cover = np.zeros((lanes, width), dtype=np.float32)
    for k, name in enumerate(boxes.kind_names):
        pick = boxes.kind == k
        occ = lane_occupancy(lane[pick], boxes.start_ms[pick] / geometry.ms_per_px,
                             boxes.end_ms[pick] / geometry.ms_per_px, lanes, width)
        rgb += occ[:, :, None] * _rgb(lp.kind_color(name))
        cover += occ
    rgba = np.zeros((lanes + 1, width, 4), dtype=np.float32)  # the extra last lane is the transparent gap
    rgba[:lanes, :, :3] = rgb / np.maximum(cover, 1e-12)[:, :, None]
    rgba[:lanes, :, 3] = np.clip(cover, 0.0, 1.0)
    # Rounding in the cumulative sums leaves values a hair outside [0, 1]: clip them.
    return np.clip(rgba, 0.0, 1.0)[_pixel_lanes(geometry, height)]


def _pixel_lanes(geometry, height):
    """For each pixel row of the axes, the lane under its center (or the gap lane).

    Below DENSE_ROW_PX pixels per rank, lanes and gaps would alias into stripes: the
    compute lane then fills its whole row and communication is left out.
    """
    y = -0.5 + (np.arange(height) + 0.5) * geometry.rows / height
    row = np.floor(y + 0.5).astype(np.int64)
    if geometry.px_per_row < DENSE_ROW_PX:
        return row * 2
    offset = y - row
    lane = np.full(height, geometry.rows * 2)
    c0, ch = geometry.compute_lane
    in_compute = (offset >= c0) & (offset < c0 + ch)
    lane[in_compute] = row[in_compute] * 2
    if geometry.comm_lane:
        m0, mh = geometry.comm_lane
        in_comm = (offset >= m0) & (offset < m0 + mh)
        lane[in_comm] = row[in_comm] * 2 + 1
    return lane


# ----------------------------------------------------------------------------- drawing


def windowed(timeline, start_ms, end_ms):
    """The operations overlapping [start_ms, end_ms), clipped to it and shifted to start at 0."""
    a, b = start_ms / 1e3, end_ms / 1e3
    keep = (timeline.end_s > a) & (timeline.start_s < b)
    return replace(timeline, rank=timeline.rank[keep], kind_code=timeline.kind_code[keep],
                   module_code=timeline.module_code[keep], stage=timeline.stage[keep],
                   microbatch=timeline.microbatch[keep],
                   start_s=np.clip(timeline.start_s[keep], a, b) - a,
                   end_s=np.clip(timeline.end_s[keep], a, b) - a)


def render_gantt(timeline, metrics=None, ranks=None, show_comm=True, max_boxes=MAX_BOXES,
                 window_ms=None):
    """Draws the Gantt chart and returns the Figure (not saved).

    ranks: the ranks to draw, in order; None picks at most lp.MAX_PLOTTED_RANKS evenly
    spaced ones. Above max_boxes boxes, lanes are drawn as a pixel image instead.
    window_ms: (start, end) draws only that stretch of the iteration, its start at 0.
    """
    all_ranks = timeline.ranks()
    ranks = lp.select_ranks(all_ranks) if ranks is None else sorted(ranks)
    t_end = max(timeline.end_time_s(), (metrics or {}).get("iteration_time_s", 0.0))
    x_label = "time (ms)"
    if window_ms is not None:
        timeline = windowed(timeline, *window_ms)
        t_end = (window_ms[1] - window_ms[0]) / 1e3
        x_label = f"time (ms after {window_ms[0]:g} ms)"
    geometry = _geometry(len(ranks), show_comm, t_end if t_end > 0 else 1e-3)
    boxes = select_boxes(timeline, ranks, show_comm)
    aggregated = len(boxes) if len(boxes) > max_boxes else 0
    notes = []
    if aggregated and show_comm and geometry.px_per_row < DENSE_ROW_PX:
        show_comm = False  # the image leaves communication out: so must the legend
        boxes = select_boxes(timeline, ranks, show_comm)
        notes.append("too dense for comm lanes")
    if aggregated:
        boxes.modules, boxes.module = [], np.zeros(len(boxes), dtype=np.int64)
        notes.insert(0, f"{aggregated:,} boxes aggregated per pixel")

    legend_entries = len(boxes.kind_names) + len(boxes.modules)
    bottom_in = 0.6 + LEGEND_ROW_IN * _legend_rows(legend_entries)  # ticks, x label, legend
    fig, ax = lp.new_figure(FIG_WIDTH_IN,
                            geometry.axes_height_in + bottom_in + MARGINS_IN["top_in"],
                            bottom_in=bottom_in, **MARGINS_IN)
    # Limits first: with autoscaling off, adding hundreds of collections stays linear.
    ax.set_xlim(0, geometry.x_max_ms)
    ax.set_ylim(geometry.rows - 0.5, -0.5)  # rank order top to bottom
    if aggregated:
        ax.imshow(aggregate_image(boxes, geometry), extent=(0, geometry.x_max_ms,
                  geometry.rows - 0.5, -0.5), aspect="auto", interpolation="nearest",
                  origin="upper", zorder=2)
    else:
        _draw_boxes(ax, boxes, geometry)
        if geometry.compute_lane[1] * geometry.px_per_row >= 9:  # room for digits
            _draw_labels(ax, boxes, geometry)
    _decorate(ax, ranks, boxes, show_comm, x_label)
    ax.set_title(_title(metrics, timeline, len(ranks), len(all_ranks), notes), fontsize=10)
    return fig


def _draw_boxes(ax, boxes, geometry):
    """One broken_barh per (row, kind, module): thousands of boxes in a few collections."""
    # A 0.7 ms send in a 2 s iteration is under a pixel; widen short (not empty) boxes
    # to one pixel so they stay visible. Only the drawing is widened, never the data.
    width = boxes.end_ms - boxes.start_ms
    width = np.where(width > 0, np.maximum(width, geometry.ms_per_px), 0.0)
    compute = [lp.is_compute(k) for k in boxes.kind_names]
    edges = len(width) <= HATCH_MAX_BOXES  # thin separators only where boxes are few
    n_modules = int(boxes.module.max(initial=0)) + 1
    key = (boxes.row * len(boxes.kind_names) + boxes.kind) * n_modules + boxes.module
    order = np.lexsort((boxes.start_ms, key))
    for group in np.split(order, np.flatnonzero(np.diff(key[order])) + 1) if len(order) else []:
        first = group[0]
        k = int(boxes.kind[first])
        lane = geometry.compute_lane if compute[k] else geometry.comm_lane
        ax.broken_barh(np.column_stack((boxes.start_ms[group], width[group])),
                       (boxes.row[first] + lane[0], lane[1]),
                       facecolors=lp.kind_color(boxes.kind_names[k]),
                       edgecolors="white" if edges and compute[k] else "none",
                       linewidths=0.4, hatch=lp.module_hatch(int(boxes.module[first])) or None)


def _draw_labels(ax, boxes, geometry):
    """Microbatch numbers inside compute boxes wide enough to hold them."""
    compute = np.array([lp.is_compute(k) for k in boxes.kind_names])[boxes.kind]
    mb = boxes.microbatch
    digits = np.floor(np.log10(np.maximum(mb, 1))) + 1
    char_px = LABEL_FONT_PT * CHAR_WIDTH_EM * lp.DPI / 72
    width_px = (boxes.end_ms - boxes.start_ms) / geometry.ms_per_px
    chosen = np.flatnonzero(compute & (mb >= 0) & (width_px >= digits * char_px + 3))
    if len(chosen) > MAX_LABELS:
        return
    y_mid = geometry.compute_lane[0] + geometry.compute_lane[1] / 2
    for i in chosen:
        color = lp.kind_color(boxes.kind_names[boxes.kind[i]])
        # The box color behind the digits keeps them legible over module hatching.
        ax.text((boxes.start_ms[i] + boxes.end_ms[i]) / 2, boxes.row[i] + y_mid, str(mb[i]),
                ha="center", va="center", fontsize=LABEL_FONT_PT, color=_text_color(color),
                clip_on=True, bbox=dict(facecolor=color, edgecolor="none", pad=0.6))


def _decorate(ax, ranks, boxes, show_comm, x_label="time (ms)"):
    """Axes, rank labels and a legend of the kinds (and modules) actually drawn."""
    from matplotlib.patches import Patch
    from matplotlib.transforms import offset_copy

    _rank_ticks(ax, ranks)
    ax.set_xlabel(x_label)
    if show_comm:
        ax.set_ylabel("compute lane, thin comm lane below", fontsize=8)
    ax.grid(axis="x", color="#E0E0E0", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = [Patch(facecolor=lp.kind_color(k), label=lp.KIND_LABELS.get(k, k))
               for k in boxes.kind_names]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=lp.module_hatch(i),
                      label=f"module {m}") for i, m in enumerate(boxes.modules)]
    # Anchored a fixed distance under the axes (below the x label) whatever the height.
    below = offset_copy(ax.transAxes, fig=ax.figure, y=-26, units="points")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
              bbox_transform=below, ncol=max(1, -(-len(handles) // _legend_rows(len(handles)))),
              frameon=False, fontsize=8)


def _rank_ticks(ax, ranks):
    """A label per row while they fit (about 10 px each), else evenly spaced ones."""
    px = ax.get_position().height * ax.figure.get_figheight() * lp.DPI
    step = max(1, int(np.ceil(len(ranks) * 10 / px)))
    ticks = list(range(0, len(ranks), step))
    if step > 1 and ticks[-1] != len(ranks) - 1:
        ticks[-1] = len(ranks) - 1  # always label the last rank
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"rank {ranks[i]}" for i in ticks],
                       fontsize=8 if len(ranks) <= 16 else 7)


# ----------------------------------------------------------------------------- command line


def build_parser():
    parser = argparse.ArgumentParser(
        prog="gantt.py",
        description="Draw the Gantt chart of a `loom sim` run: one row per rank, boxes "
                    "colored by operation kind (F, B, I, W; communication in grey).",
        epilog="Exit codes: 0 ok, 2 malformed input (the message names file and line), "
               "1 internal error.")
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="directory with timeline.csv (and optionally metrics.json)")
    parser.add_argument("-o", "--output", metavar="OUT.png",
                        help="where to write the PNG (default: RUN_DIR/gantt.png)")
    parser.add_argument("--ranks", metavar="LIST",
                        help="ranks to draw, e.g. 0,1,5 or 0-3 (default: all, or "
                             f"{lp.MAX_PLOTTED_RANKS} evenly spaced ones incl. first and last)")
    parser.add_argument("--no-comm", action="store_true",
                        help="omit the communication lane (send/recv/collectives)")
    parser.add_argument("--window", metavar="START:END",
                        help="draw only this stretch of the iteration, in ms (e.g. 5600:6000: "
                             "a few steady-state steps of a long run)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    timeline = lp.load_timeline(os.path.join(args.run_dir, "timeline.csv"))
    metrics = lp.load_metrics(os.path.join(args.run_dir, "metrics.json"), required=False)
    ranks = lp.parse_rank_list(args.ranks, timeline.ranks()) if args.ranks else None
    window = None
    if args.window:
        try:
            window = tuple(float(x) for x in args.window.split(":"))
            if len(window) != 2 or not window[0] < window[1]:
                raise ValueError
        except ValueError:
            print(f"gantt.py: --window: expected START:END in ms with START < END, got "
                  f"'{args.window}'", file=sys.stderr)
            return 2
    fig = render_gantt(timeline, metrics, ranks=ranks, show_comm=not args.no_comm,
                       window_ms=window)
    out = args.output or os.path.join(args.run_dir, "gantt.png")
    lp.save_png(fig, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(lp.run_cli("gantt.py", main, sys.argv[1:]))
