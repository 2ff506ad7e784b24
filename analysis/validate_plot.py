#!/usr/bin/env python3
"""Predicted vs measured seconds per iteration (log-log) with the +-10 % band.

Input: the CSV `loom validate --png` writes (run,backend,measured_s,predicted_s).
    python3 analysis/validate_plot.py runs.csv --out validation.png
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{args.csv}: no rows")
    fig, ax = plt.subplots(figsize=(5.5, 5))
    lo = min(min(float(r["measured_s"]), float(r["predicted_s"])) for r in rows) * 0.8
    hi = max(max(float(r["measured_s"]), float(r["predicted_s"])) for r in rows) * 1.25
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=1, label="predicted = measured")
    ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="grey", alpha=0.2,
                    label="±10 %")
    markers = {"evaluator": "o", "simgrid": "x"}
    for backend in sorted({r["backend"] for r in rows}):
        sel = [r for r in rows if r["backend"] == backend]
        ax.scatter([float(r["measured_s"]) for r in sel], [float(r["predicted_s"]) for r in sel],
                   marker=markers.get(backend, "s"), label=backend)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured s / iteration")
    ax.set_ylabel("predicted s / iteration")
    ax.set_title("Loom vs published runs")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
