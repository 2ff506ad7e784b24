#!/usr/bin/python3
"""Draws every plot of a `loom sim` run: RUN_DIR/gantt.png and RUN_DIR/memory.png.

`loom sim` runs this after writing its files. All inputs are loaded and checked before
anything is drawn, so malformed input produces no image at all (exit 2, one line naming
file and line), and each PNG appears only once complete.
"""

import argparse
import os
import sys

import loom_plot as lp
from gantt import render_gantt
from memory_plot import render_memory


def build_parser():
    parser = argparse.ArgumentParser(
        prog="plot_all.py",
        description="Write gantt.png and memory.png into a `loom sim` output directory "
                    "(from its timeline.csv, memory.csv and, when present, metrics.json). "
                    "For options (rank subsets, capacity line) run gantt.py or "
                    "memory_plot.py directly.",
        epilog="Exit codes: 0 ok, 2 malformed input (the message names file and line), "
               "1 internal error.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the directory `loom sim` wrote")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on success (errors still go to stderr)")
    return parser


def capacity_gib(metrics):
    """The GPU memory `loom sim` planned against (metrics.json `gpu_memory_bytes`), in GiB."""
    value = (metrics or {}).get("gpu_memory_bytes")
    return value / 2**30 if isinstance(value, (int, float)) and value > 0 else None


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not os.path.isdir(args.run_dir):
        raise lp.LoomInputError(args.run_dir, "not a directory")
    timeline = lp.load_timeline(os.path.join(args.run_dir, "timeline.csv"))
    memory = lp.load_memory(os.path.join(args.run_dir, "memory.csv"))
    metrics = lp.load_metrics(os.path.join(args.run_dir, "metrics.json"), required=False)

    outputs = [
        ("gantt.png", lambda: render_gantt(timeline, metrics)),
        ("memory.png", lambda: render_memory(memory, metrics, capacity_gib=capacity_gib(metrics),
                                             t_end=timeline.end_time_s())),
    ]
    for name, render in outputs:
        path = os.path.join(args.run_dir, name)
        lp.save_png(render(), path)
        if not args.quiet:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(lp.run_cli("plot_all.py", main, sys.argv[1:]))
