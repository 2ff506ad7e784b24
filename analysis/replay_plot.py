#!/usr/bin/python3
"""Spot-failure replay plots: throughput over time and where the time went, per policy.

Reads replay output directories (`loom replay ... --out DIR`), each with
  throughput.csv  time_s,nodes,samples_per_s  a step function: from time_s on, the job
                  trains at samples_per_s with `nodes` alive; the last row is the end
  summary.json    {"policy", "trace", "duration_s", "average_throughput_samples_per_s",
                   "time_s": {"training", "restart", "checkpoint", "reconfiguration",
                              "lost_work", "idle"}, ...}
  events.csv      (optional) time_s,event,nodes_alive,action,cost_s,detail: restarts
                  (action "restart") and reconfigurations (any other action with a cost,
                  checkpoints aside) become markers
and draws
  replay_throughput.png  every policy's throughput over time on one chart, as step lines,
                         with its average as a dotted line, its restarts (x) and
                         reconfigurations (|) as markers under the axis' top, and the alive
                         node count on a second axis (dissertation Fig 2.10 style);
  replay_breakdown.png   one stacked bar per policy: the share of wall-clock time spent
                         training, restarting, checkpointing, copying layers /
                         reconfiguring, redoing lost work and idle (Fig 2.11 style).

Example:
  analysis/replay_plot.py out/p3-oobleck out/p3-varuna out/p3-bamboo -o out/p3 --window 5min
"""

import argparse
import csv
import os
import re
import sys

import numpy as np

import loom_plot as lp

THROUGHPUT_COLUMNS = ("time_s", "nodes", "samples_per_s")
# Fig 2.11's categories, in stacking order (training at the bottom), with fixed colors.
BREAKDOWN = (
    ("training", "training", "#55A868"),
    ("restart", "restart", "#C44E52"),
    ("checkpoint", "checkpoint", "#DD8452"),
    ("reconfiguration", "copy / reconfiguration", "#8172B3"),
    ("lost_work", "lost work", "#937860"),
    ("idle", "idle", "#C7C7C7"),
)
# Policies the replay knows get the same color in every figure; others cycle through tab10.
POLICY_COLORS = {"oobleck": "#4C72B0", "varuna-like": "#DD8452", "bamboo-like": "#55A868"}
FIG_THROUGHPUT_IN = (11.0, 4.8)
LEGEND_IN_PER_CHAR = 0.075  # legend text width at the default 10 pt font
FIG_BREAKDOWN_IN = (6.5, 4.8)
MARGINS_IN = dict(left_in=0.8, right_in=2.6, top_in=0.45, bottom_in=0.6)  # legend at right
BREAKDOWN_MARGINS_IN = dict(left_in=0.8, right_in=1.9, top_in=0.45, bottom_in=0.6)


class Replay:
    """One replay directory: its throughput step function and (optional) summary."""

    def __init__(self, directory, time_s, nodes, samples_per_s, summary, markers=None):
        self.directory = directory
        self.time_s = time_s
        self.nodes = nodes
        self.samples_per_s = samples_per_s
        self.summary = summary
        # {"restart": [time_s...], "reconfiguration": [time_s...]} from events.csv
        self.markers = markers or {"restart": [], "reconfiguration": []}

    @property
    def policy(self):
        if self.summary:
            return self.summary["policy"]
        return os.path.basename(os.path.normpath(self.directory))

    @property
    def end_s(self):
        return float(self.time_s[-1])


# ----------------------------------------------------------------------------- loading


def load_throughput(path):
    """throughput.csv as (time_s, nodes, samples_per_s) arrays; time must not go back."""
    path = str(path)
    cols = lp._read_columns(path, THROUGHPUT_COLUMNS)
    time_s = lp._floats(path, "time_s", cols["time_s"])
    nodes = lp._ints(path, "nodes", cols["nodes"], minimum=0)
    rate = lp._floats(path, "samples_per_s", cols["samples_per_s"])
    back = time_s[1:] < time_s[:-1]
    if back.any():
        i = int(np.argmax(back)) + 1
        raise lp.LoomInputError(path, f"time goes backwards ({cols['time_s'][i].strip()} after "
                                f"{cols['time_s'][i - 1].strip()})", line=i + 2, column="time_s")
    return time_s, nodes, rate


def load_summary(path, required=True):
    """summary.json as a dict, with the keys the plots use type-checked; None if absent."""
    path = str(path)
    loaded = lp.load_json_object(path, required)
    if loaded is None:
        return None
    summary, text = loaded
    policy = summary.get("policy")
    if not isinstance(policy, str) or not policy:
        what = "expected a non-empty string" if "policy" in summary else "missing"
        raise lp.LoomInputError(path, f"key 'policy': {what}", line=_line_of(text, "policy"))
    for key in ("duration_s", "average_throughput_samples_per_s"):
        _check_number(path, text, summary, key, summary.get(key))
    times = summary.get("time_s")
    if not isinstance(times, dict):
        raise lp.LoomInputError(path, "key 'time_s': expected an object with "
                                + ", ".join(k for k, _, _ in BREAKDOWN),
                                line=_line_of(text, "time_s"))
    for key, _, _ in BREAKDOWN:
        _check_number(path, text, summary, f"time_s.{key}", times.get(key), leaf=key)
    return summary


def _line_of(text, key):
    """1-based line of the first `"key":` in the JSON text, or None."""
    m = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _check_number(path, text, summary, name, value, leaf=None):
    """A finite number >= 0, or an error naming the key (and its line when present)."""
    if value is None:
        raise lp.LoomInputError(path, f"missing key '{name}'")
    if not lp._is_number(value) or value < 0:
        raise lp.LoomInputError(path, f"key '{name}': expected a number >= 0, got {value!r}",
                                line=_line_of(text, leaf or name))


def load_replay(directory):
    """A replay directory: throughput.csv is required, summary.json is optional."""
    directory = str(directory)
    if not os.path.isdir(directory):
        raise lp.LoomInputError(directory, "not a directory (expected a loom replay --out DIR)")
    time_s, nodes, rate = load_throughput(os.path.join(directory, "throughput.csv"))
    summary = load_summary(os.path.join(directory, "summary.json"), required=False)
    markers = load_markers(os.path.join(directory, "events.csv"))
    return Replay(directory, time_s, nodes, rate, summary, markers)


def load_markers(path):
    """Restart and reconfiguration times from events.csv; none when it is absent."""
    markers = {"restart": [], "reconfiguration": []}
    if not os.path.exists(path):
        return markers
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                time_s, cost_s = float(row["time_s"]), float(row["cost_s"])
            except (KeyError, TypeError, ValueError):
                raise lp.LoomInputError(path, "expected time_s,...,action,cost_s columns")
            action = row.get("action", "")
            if action == "restart":
                markers["restart"].append(time_s)
            elif cost_s > 0 and action != "checkpoint":
                markers["reconfiguration"].append(time_s)
    return markers


# ----------------------------------------------------------------------------- series


def window_average(time_s, values, end_s, window_s):
    """Time averages of a step function over consecutive windows [k w, (k+1) w).

    The integral of a step function is piecewise linear, so interpolating it at the
    window edges gives exact averages (the paper's Fig 2.10 plots such window averages).
    Returns (left edges, averages); the last window is cut at end_s.
    """
    t = np.append(time_s, end_s)
    area = np.concatenate(([0.0], np.cumsum(values * np.diff(t))))
    edges = np.arange(0.0, end_s, window_s)
    edges = np.append(edges, end_s)
    integral = np.interp(edges, t, area, left=0.0)
    widths = np.diff(edges)
    avg = np.divide(np.diff(integral), widths, out=np.zeros_like(widths), where=widths > 0)
    return edges[:-1], avg


def breakdown_fractions(summary):
    """{category: share of the categories' total}; all zeros when nothing was recorded."""
    times = {k: float(summary["time_s"][k]) for k, _, _ in BREAKDOWN}
    total = sum(times.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in times.items()}


def _labels(replays):
    """Policy names, with the directory added where two replays share a policy."""
    names = [r.policy for r in replays]
    return [f"{n} ({os.path.basename(os.path.normpath(r.directory))})" if names.count(n) > 1
            else n for n, r in zip(names, replays)]


def _colors(replays):
    from matplotlib import colormaps

    cycle = colormaps["tab10"]
    out, spare, used = [], 0, set()
    for r in replays:
        if r.policy in POLICY_COLORS and r.policy not in used:  # a repeat gets its own
            out.append(POLICY_COLORS[r.policy])
            used.add(r.policy)
        else:
            out.append(cycle(3 + spare % 7))
            spare += 1
    return out


# ----------------------------------------------------------------------------- figures


def render_throughput(replays, window_s=None, title=None):
    """Fig 2.10 style: throughput step lines per policy, averages dotted, alive nodes."""
    # The legend sits right of the axes: widen the figure for long labels (shared policies).
    longest = max(len(label) for label in _labels(replays)) + len(" average 000.00")
    extra_in = max(0.0, LEGEND_IN_PER_CHAR * longest - MARGINS_IN["right_in"] + 0.6)
    width_in, height_in = FIG_THROUGHPUT_IN
    fig, ax = lp.new_figure(width_in + extra_in, height_in,
                            **{**MARGINS_IN, "right_in": MARGINS_IN["right_in"] + extra_in})
    end_s = max(r.end_s for r in replays)
    top = 0.0
    for r, label, color in zip(replays, _labels(replays), _colors(replays)):
        if window_s:
            x, y = window_average(r.time_s[:-1], r.samples_per_s[:-1], r.end_s, window_s)
        else:
            x, y = r.time_s[:-1], r.samples_per_s[:-1]
        if len(x) == 0:  # a single row: nothing ran before the end
            x, y = r.time_s, r.samples_per_s
        x = np.append(x, r.end_s) / 3600.0
        y = np.append(y, y[-1])
        if not r.samples_per_s.any():
            label += " (no progress)"  # a line on the x axis is easy to miss
        ax.step(x, y, where="post", color=color, linewidth=1.3, label=label)
        top = max(top, float(y.max()))
        if r.summary:
            avg = r.summary["average_throughput_samples_per_s"]
            ax.axhline(avg, color=color, linestyle=":", linewidth=1.2,
                       label=f"{label} average {avg:.2f}")
    ax.set_xlim(0, end_s / 3600.0 if end_s > 0 else 1.0)
    ax.set_ylim(0, top * (1.06 + 0.03 * len(replays)) if top > 0 else 1.0)
    _draw_markers(ax, replays, top if top > 0 else 0.9)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("throughput (samples/s)" + (f", {_fmt_window(window_s)} averages"
                                              if window_s else ""))
    ax.grid(color="#E0E0E0", linewidth=0.6)
    ax.set_axisbelow(True)
    twin = _draw_alive(ax, replays)
    ax.set_title(title or _default_title(replays, "Throughput over the trace"), fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = twin.get_legend_handles_labels()
    ax.legend(handles + h2, labels + l2, loc="upper left", bbox_to_anchor=(1.09, 1.0),
              fontsize=8, frameon=False)
    return fig


def _draw_markers(ax, replays, top):
    """Restarts (x) and reconfigurations (|) of each policy, in its color, one row per
    policy above the highest throughput (`top`)."""
    for i, (r, label, color) in enumerate(zip(replays, _labels(replays), _colors(replays))):
        y = top * (1.02 + 0.03 * i)
        for kind, marker, name in (("reconfiguration", "|", "reconfig."), ("restart", "x",
                                                                           "restarts")):
            times = np.asarray(r.markers[kind], dtype=float) / 3600.0
            if len(times):
                ax.plot(times, np.full(len(times), y), linestyle="none", marker=marker,
                        markersize=5, color=color, label=f"{label} {name} ({len(times)})")


def _draw_alive(ax, replays):
    """Alive node count on a right-hand axis, as a light step area; returns that axis.

    A replay writes a row only when its own state changes, so a policy that never trains
    (out of memory) may hold one row for the whole trace. When all replays share a trace,
    the one with the most rows draws the line; otherwise the first does, and says so.
    """
    twin = ax.twinx()
    source, same = alive_source(replays)
    x, y, stopped = alive_steps(source)
    label = "alive nodes" if same else f"alive nodes ({_labels(replays)[0]})"
    if stopped:  # after the stop the replay saw no more nodes: no line pretends it did
        twin.axvline(x[-1], color="#7F7F7F", linestyle=":", linewidth=1.0)
        twin.text(x[-1], 0.02, f" {source.policy} stopped: {stopped}", rotation=90,
                  transform=twin.get_xaxis_transform(), fontsize=7, color="#555555",
                  va="bottom")
    # A thin grey step line shows each join and loss; the faint fill ties it to its axis.
    twin.fill_between(x, 0, y, step="post", color="#7F7F7F", alpha=0.08, linewidth=0)
    twin.step(x, y, where="post", color="#7F7F7F", linewidth=1.0, label=label)
    twin.set_ylim(0, max(1, int(y.max())) * 1.1)
    twin.set_ylabel("alive nodes")
    ax.set_zorder(twin.get_zorder() + 1)  # lines above the shaded area
    ax.patch.set_visible(False)
    return twin


def alive_steps(replay):
    """(x hours, alive nodes, stop reason or None): the replay's node column as steps, cut
    where the policy stopped for good (summary.json's `stopped`, e.g. out of memory)."""
    stopped = (replay.summary or {}).get("stopped") or {}
    end = min(replay.end_s, float(stopped.get("time_s", replay.end_s)))
    keep = replay.time_s <= end
    x = np.append(replay.time_s[keep], end) / 3600.0
    y = np.append(replay.nodes[keep], replay.nodes[keep][-1])
    return x, y, stopped.get("reason") if stopped else None


def alive_source(replays):
    """(the replay whose node column draws the alive line, whether all share one trace)."""
    same = all(_same_trace(replays[0], r) for r in replays[1:])
    index = int(np.argmax([len(r.time_s) for r in replays])) if same else 0
    return replays[index], same


def _same_trace(a, b):
    """Whether two replays ran on one trace (so one alive-node line describes both)."""
    if a.summary and b.summary:
        return a.summary.get("trace") == b.summary.get("trace")
    return np.array_equal(a.time_s, b.time_s) and np.array_equal(a.nodes, b.nodes)


def render_breakdown(replays, title=None):
    """Fig 2.11 style: stacked shares of wall-clock time per policy."""
    missing = [r.directory for r in replays if not r.summary]
    if missing:
        raise lp.LoomInputError(os.path.join(missing[0], "summary.json"),
                                "file not found (the time breakdown needs it)")
    fig, ax = lp.new_figure(*FIG_BREAKDOWN_IN, **BREAKDOWN_MARGINS_IN)
    labels = _labels(replays)
    x = np.arange(len(replays))
    bottom = np.zeros(len(replays))
    fractions = [breakdown_fractions(r.summary) for r in replays]
    for key, name, color in BREAKDOWN:
        share = np.array([f[key] for f in fractions]) * 100.0
        ax.bar(x, share, 0.6, bottom=bottom, color=color, label=name, edgecolor="white",
               linewidth=0.5)
        bottom += share
    for i, r in enumerate(replays):
        hours = sum(float(r.summary["time_s"][k]) for k, _, _ in BREAKDOWN) / 3600.0
        ax.annotate(f"{hours:.2f} h", (x[i], bottom[i]), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=8)
    ax.set_xticks(x, labels, fontsize=9)
    ax.set_xlim(-0.6, len(replays) - 0.4)
    ax.set_ylim(0, 110)
    ax.set_ylabel("share of wall-clock time (%)")
    ax.grid(axis="y", color="#E0E0E0", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title or _default_title(replays, "Where the time went"), fontsize=10)
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], names[::-1], loc="upper left", bbox_to_anchor=(1.02, 1.0),
              fontsize=8, frameon=False)
    return fig


def _default_title(replays, head):
    traces = sorted({os.path.basename(str(r.summary["trace"])) for r in replays
                     if r.summary and isinstance(r.summary.get("trace"), str)})
    return head + (" — " + ", ".join(traces) if traces else "")


def _fmt_window(window_s):
    return f"{window_s / 60:g} min" if window_s >= 60 else f"{window_s:g} s"


# ----------------------------------------------------------------------------- CLI


def parse_duration(text):
    """'5min', '300s', '0.5h' or a bare number of seconds -> seconds > 0."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|min|h)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise lp.LoomInputError("--window", f"expected a duration like 5min, 300s or 0.5h, "
                                f"got '{text}'")
    return float(m.group(1)) * {"s": 1, None: 1, "min": 60, "h": 3600}[m.group(2)]


def build_parser():
    parser = argparse.ArgumentParser(
        prog="replay_plot.py",
        description="Throughput over time (Fig 2.10 style) and time breakdown (Fig 2.11 "
                    "style) of spot-failure replays, one policy per directory.")
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="loom replay output directories (throughput.csv, summary.json)")
    parser.add_argument("-o", "--out-dir", default=".", metavar="OUT",
                        help="where to write replay_throughput.png and replay_breakdown.png, "
                             "created if missing (default: the current directory)")
    parser.add_argument("--window", metavar="DURATION",
                        help="plot throughput averaged over windows of this length (e.g. "
                             "5min), as the paper's Fig 2.10 does; default: the raw steps")
    parser.add_argument("--title", help="title of the throughput figure")
    parser.add_argument("--only", choices=("throughput", "breakdown"),
                        help="draw only one of the two figures")
    parser.add_argument("--quiet", action="store_true",
                        help="do not print the files written (loom replay --plot)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    window_s = parse_duration(args.window) if args.window else None
    replays = [load_replay(d) for d in args.dirs]
    # Created with its parents, like loom's own --out; a file in its place is bad input.
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        raise lp.LoomInputError(args.out_dir, "exists and is not a directory")
    os.makedirs(args.out_dir, exist_ok=True)
    if args.only in (None, "throughput"):
        out = os.path.join(args.out_dir, "replay_throughput.png")
        lp.save_png(render_throughput(replays, window_s, args.title), out)
        if not args.quiet:
            print(f"wrote {out}")
    if args.only in (None, "breakdown"):
        out = os.path.join(args.out_dir, "replay_breakdown.png")
        lp.save_png(render_breakdown(replays), out)
        if not args.quiet:
            print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(lp.run_cli("replay_plot.py", main, sys.argv[1:]))
