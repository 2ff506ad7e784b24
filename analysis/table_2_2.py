#!/usr/bin/env python3
"""Dissertation Table 2.2 from Loom: throughput (samples/s) of Oobleck, Varuna-like and
Bamboo-like under one failure every 6 h / 1 h / 10 min on 30 nodes, the paper's numbers
beside Loom's.

  measured    the five artifact models, iteration times from Oobleck's measured throughput
              by live node count and the artifact's failure costs
              (configs/paper/oobleck-<model>-measured.toml, traces/oobleck/)
  simulation  the GPT-3 sizes of Table 2.1 on 30 A40-class nodes, iteration times from
              Loom's backend (configs/paper/oobleck-gpt3-<size>.toml)

Usage: analysis/table_2_2.py [--mode measured|simulation|both] [--loom build/cli/loom]
                             [--backend evaluator|simgrid] [--out DIR] [--markdown]
                             [--ratios]
Exit status 1 when a measured-mode Oobleck cell is more than 5% off the paper.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FREQS = ["6h", "1h", "10m"]
POLICIES = ["bamboo-like", "varuna-like", "oobleck"]
PAPER_NAME = {"bamboo-like": "Bamboo", "varuna-like": "Varuna", "oobleck": "Oobleck"}

# Dissertation Table 2.2 (samples/s); None = Bamboo OOM ("Bamboo was not able to run any
# GPT-3 model due to lack of memory").
PAPER = {
    "6h": {"bamboo-like": [77.04, 17.47, None, None, None],
           "varuna-like": [260.11, 86.51, 29.50, 7.27, 4.14],
           "oobleck": [287.10, 85.59, 29.30, 7.29, 4.33]},
    "1h": {"bamboo-like": [75.60, 17.13, None, None, None],
           "varuna-like": [246.03, 85.17, 28.49, 6.53, 2.69],
           "oobleck": [286.28, 85.42, 29.21, 7.23, 4.22]},
    "10m": {"bamboo-like": [69.84, 16.01, None, None, None],
            "varuna-like": [173.52, 76.39, 20.19, 1.76, 0.26],
            "oobleck": [282.11, 84.80, 28.70, 6.89, 3.55]},
}
PAPER_MODELS = ["BERT-Large", "GPT-2", "GPT-3 Med", "GPT-3 2.7b", "GPT-3 6.7b"]

MEASURED = [("bert-large", "BERT-Large", 0), ("gpt2", "GPT-2", 1),
            ("gpt3-medium", "GPT-3 Med", 2), ("gpt3-2.7b", "GPT-3 2.7b", 3),
            ("gpt3-6.7b", "GPT-3 6.7b", 4)]
SIMULATED = [("350m", "GPT-3 350M", 2), ("1.3b", "GPT-3 1.3B", None),
             ("2.7b", "GPT-3 2.7B", 3), ("6.7b", "GPT-3 6.7B", 4)]


def replay(loom, config, freq, policy, out, extra):
    out_dir = os.path.join(out, f"{os.path.basename(config)[:-5]}-{freq}-{policy}")
    cmd = [loom, "replay", config, "--trace", os.path.join(ROOT, "traces/oobleck", freq + ".csv"),
           "--policy", policy, "--out", out_dir, "--force", "-q"] + extra
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"table_2_2: {' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    return summary


def fmt(v):
    return "OOM" if v is None else f"{v:.2f}"


def table(loom, mode, rows, out, extra, markdown):
    """Runs every cell; returns the rows printed and the worst Oobleck deviation."""
    header = ["Freq.", "System"] + [f"{label} paper | Loom" for _, label, _ in rows]
    lines, worst = [], 0.0
    for freq in FREQS:
        for policy in POLICIES:
            cells = []
            for key, _, paper_index in rows:
                config = os.path.join(ROOT, "configs/paper",
                                      f"oobleck-{key}-measured.toml" if mode == "measured"
                                      else f"oobleck-gpt3-{key}.toml")
                s = replay(loom, config, freq, policy, out, extra)
                loom_v = s["average_throughput_samples_per_s"]
                stopped = s.get("stopped", {}).get("reason", "")
                paper_v = None if paper_index is None else PAPER[freq][policy][paper_index]
                if paper_index is None:
                    paper_txt = "-"
                else:
                    paper_txt = fmt(paper_v)
                loom_txt = "OOM" if "memory" in stopped and loom_v == 0 else f"{loom_v:.2f}"
                if policy == "oobleck" and paper_v:
                    dev = loom_v / paper_v - 1
                    worst = max(worst, abs(dev))
                    loom_txt += f" ({dev * 100:+.1f}%)"
                cells.append((paper_txt, loom_txt))
            lines.append((freq, PAPER_NAME[policy], cells))
    print(f"\n{mode} mode" + (" (" + " ".join(extra) + ")" if extra else ""))
    if markdown:
        head = ["Freq.", "System"]
        for _, label, _ in rows:
            head += [f"{label} paper", f"{label} Loom"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for freq, system, cells in lines:
            flat = [c for pair in cells for c in pair]
            print("| " + " | ".join([freq, system] + flat) + " |")
    else:
        table_rows = [header] + [[f, sy] + [f"{p} | {l}" for p, l in cells]
                                 for f, sy, cells in lines]
        widths = [max(len(r[i]) for r in table_rows) for i in range(len(header))]
        for r in table_rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return worst


def ratios(loom, out):
    """Measured mode: each baseline's throughput over Oobleck's, paper beside Loom, and
    whether the direction (baseline below or above Oobleck, or out of memory) agrees."""
    print("\n| model | failure every | Varuna/Oobleck paper | Loom | Bamboo/Oobleck paper | Loom "
          "| direction |")
    print("|---|---|---:|---:|---:|---:|---|")
    agree = total = 0
    for key, label, index in MEASURED:
        config = os.path.join(ROOT, "configs/paper", f"oobleck-{key}-measured.toml")
        for freq in FREQS:
            run = {p: replay(loom, config, freq, p, out, []) for p in POLICIES}
            oob = run["oobleck"]["average_throughput_samples_per_s"]
            cells, ok = [], True
            for policy in ("varuna-like", "bamboo-like"):
                paper_v = PAPER[freq][policy][index]
                loom_v = run[policy]["average_throughput_samples_per_s"]
                oom = "memory" in run[policy].get("stopped", {}).get("reason", "")
                paper_o = PAPER[freq]["oobleck"][index]
                cells += ["OOM" if paper_v is None else f"{paper_v / paper_o:.2f}",
                          "OOM" if oom else f"{loom_v / oob:.2f}"]
                if paper_v is None:
                    ok &= oom
                else:
                    ok &= (paper_v < paper_o) == (loom_v < oob) and not oom
                total += 1
            agree += ok
            print(f"| {label} | {freq} | " + " | ".join(cells) + f" | {'agrees' if ok else 'REVERSED'} |")
    print(f"\ndirection agrees in {agree} of {total // 2} rows")
    return 0 if agree == total // 2 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["measured", "simulation", "both"], default="both")
    ap.add_argument("--loom", default=os.path.join(ROOT, "build/cli/loom"))
    ap.add_argument("--backend", choices=["evaluator", "simgrid"], default="evaluator",
                    help="simulation mode's backend (default evaluator)")
    ap.add_argument("--out", help="keep the replay directories here (default: a temp dir)")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    ap.add_argument("--ratios", action="store_true",
                    help="measured mode only: each baseline's throughput over Oobleck's, "
                         "paper beside Loom, and whether the direction agrees (exit 1 if not)")
    a = ap.parse_args()
    if not os.path.exists(a.loom):
        sys.exit(f"table_2_2: {a.loom} not found (build Loom or pass --loom)")
    if a.out:
        return tables(a, a.out)
    with tempfile.TemporaryDirectory(prefix="loom-table-2-2-") as out:  # removed afterwards
        return tables(a, out)


def tables(a, out):
    if a.ratios:
        return ratios(a.loom, out)
    print("Dissertation Table 2.2: throughput (samples/s) with one failure every 6 h, 1 h, "
          "10 min; paper | Loom; Oobleck's deviation from the paper in parentheses")
    status = 0
    if a.mode in ("measured", "both"):
        worst = table(a.loom, "measured", MEASURED, out, [], a.markdown)
        ok = worst <= 0.05
        print(f"Oobleck vs paper: worst deviation {worst * 100:.2f}% "
              f"({'within' if ok else 'NOT within'} 5%)")
        status = 0 if ok else 1
    if a.mode in ("simulation", "both"):
        table(a.loom, "simulation", SIMULATED, out, ["--backend", a.backend], a.markdown)
    return status


if __name__ == "__main__":
    sys.exit(main())
