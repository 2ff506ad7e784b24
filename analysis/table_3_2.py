#!/usr/bin/python3
"""Dissertation Table 3.2 side by side: frozen-aware vs frozen-unaware partitioning.

For each of the nine MLLM-XYZ configurations (configs/paper/cornstarch-<xyz>.toml) this
runs `loom sim` twice with the encoders-colocated pipeline the table reports ("a few model
configurations with encoders being colocated", §3.5.3) -- once with
schedule.partition_view=true (frozen-aware, Eq 3.2-3.3 + Eq 3.5) and once with
partition_view=naive (backward = 2 x forward everywhere) -- and prints, next to the
paper's numbers, the per-stage forward and backward time of microbatch 0 (the slowest
encoder stage and the slowest LLM stage), the iteration time and the improvement
naive / aware.

    /usr/bin/python3 analysis/table_3_2.py [--loom build/cli/loom] [--backend evaluator]

Exit status 1 if frozen-aware is slower than frozen-unaware in any row.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENCODER_MODULES = {"vision", "vproj", "audio", "aproj"}

# Dissertation Table 3.2 ("Model forward and backward execution time breakdown
# parallelized with and without frozen status awareness"): per-stage Fwd Enc, Fwd LLM,
# Bwd Enc, Bwd LLM (ms) and the iteration time (s), frozen-aware row then unaware row.
PAPER = {
    "SSS": ((301.61, 149.40, 1.04, 518.43, 21.81), (207.13, 296.25, 0.86, 1032.63, 25.67)),
    "MMS": ((903.86, 102.61, 2.72, 346.54, 40.34), (635.56, 297.62, 1.19, 1032.12, 41.21)),
    "LLS": ((1240.50, 298.37, 1.41, 1029.98, 66.14), (1259.13, 297.92, 1.15, 1030.14, 66.20)),
    "SSM": ((464.98, 331.43, 3.53, 3017.01, 66.56), (388.33, 388.73, 2.30, 4030.74, 73.94)),
    "MMM": ((2330.90, 273.89, 2.09, 2418.27, 70.37), (712.72, 1159.76, 1.60, 12113.67, 173.01)),
    "LLM": ((2199.91, 376.11, 4.15, 4023.22, 87.43), (1403.97, 1161.76, 1.56, 12109.73, 177.39)),
    "SSL": ((773.10, 741.17, 3.55, 6309.11, 138.45), (774.19, 708.62, 3.84, 6306.18, 137.62)),
    "MML": ((2280.58, 705.73, 3.11, 6311.23, 138.97), (1015.60, 1154.85, 2.78, 10546.34, 180.28)),
    "LLL": ((5316.08, 736.05, 4.00, 6315.46, 143.76), (1597.36, 1686.28, 3.06, 15878.58, 247.79)),
}


def default_loom():
    for candidate in (ROOT / "build" / "cli" / "loom", ROOT / "build-m1" / "cli" / "loom"):
        if candidate.exists():
            return str(candidate)
    return "loom"


def run_loom(loom, config, view, backend, out_dir, scheduler):
    cmd = [loom, "sim", str(config), "--backend", backend, "--no-plot", "-q", "--out", out_dir,
           "--set", f"schedule.name={scheduler}", "--set", f"schedule.partition_view={view}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"table_3_2: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")


def per_stage_times(run_dir):
    """Slowest encoder stage and slowest LLM stage: (F enc, F llm, B enc, B llm) in ms,
    for microbatch 0 on replica 0's ranks (rank == stage)."""
    fwd, bwd = defaultdict(float), defaultdict(float)
    modules = defaultdict(set)
    with open(os.path.join(run_dir, "timeline.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] not in ("F", "B", "I", "W") or row["microbatch"] != "0":
                continue
            if row["rank"] != row["stage"]:
                continue
            stage = int(row["stage"])
            ms = (float(row["end_s"]) - float(row["start_s"])) * 1e3
            modules[stage].add(row["module"])
            (fwd if row["kind"] == "F" else bwd)[stage] += ms

    def worst(times, encoder):
        picked = [times[s] for s, mods in modules.items()
                  if (mods <= ENCODER_MODULES) == encoder]
        return max(picked, default=0.0)

    return worst(fwd, True), worst(fwd, False), worst(bwd, True), worst(bwd, False)


def measure(loom, xyz, backend, scheduler):
    config = ROOT / "configs" / "paper" / f"cornstarch-{xyz.lower()}.toml"
    rows = {}
    with tempfile.TemporaryDirectory(prefix="loom-table32-") as tmp:
        for view in ("true", "naive"):
            out = os.path.join(tmp, view)
            run_loom(loom, config, view, backend, out, scheduler)
            with open(os.path.join(out, "metrics.json")) as f:
                iteration = json.load(f)["iteration_time_s"]
            rows[view] = per_stage_times(out) + (iteration,)
    return rows


def fmt_row(values):
    return " ".join(f"{v:9.2f}" for v in values[:4]) + f" {values[4]:8.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loom", default=default_loom(), help="the loom binary")
    parser.add_argument("--backend", default="evaluator", choices=("evaluator", "simgrid"))
    parser.add_argument("--scheduler", default="encoders-colocated",
                        help="pipeline to compare (default: encoders-colocated, as the table)")
    args = parser.parse_args(argv)

    head = ("model view | paper: Fenc     Fllm      Benc      Bllm    iter s  impr"
            " | loom: Fenc     Fllm      Benc      Bllm    iter s  impr | ratio gap")
    print(f"Dissertation Table 3.2 vs Loom ({args.scheduler}, {args.backend}); "
          "per-stage times of microbatch 0 in ms")
    print(head)
    print("-" * len(head))
    bad = []
    for xyz, (paper_aware, paper_naive) in PAPER.items():
        rows = measure(args.loom, xyz, args.backend, args.scheduler)
        loom_impr = rows["naive"][4] / rows["true"][4]
        paper_impr = paper_naive[4] / paper_aware[4]
        gap = loom_impr / paper_impr - 1
        for label, p, l in (("aware", paper_aware, rows["true"]),
                            ("naive", paper_naive, rows["naive"])):
            impr = (f"{paper_impr:5.2f}x", f"{loom_impr:5.2f}x") if label == "aware" else ("", "")
            tail = f" | {gap:+6.1%}{'  >25%' if abs(gap) > 0.25 else ''}" if label == "aware" else ""
            print(f"{xyz:5} {label} | {fmt_row(p)} {impr[0]:>6} | {fmt_row(l)} {impr[1]:>6}{tail}")
        if rows["true"][4] > rows["naive"][4]:
            bad.append(xyz)
    print("impr = naive iteration / aware iteration; ratio gap = Loom's impr / paper's impr - 1")
    if bad:
        print("frozen-aware SLOWER than naive in: " + ", ".join(bad))
        return 1
    print("frozen-aware is never slower than naive (all nine rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
