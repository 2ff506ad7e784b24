#!/usr/bin/python3
"""Dissertation Table 4.3 side by side: variability of modality forward time, and throughput.

For the eight configs configs/paper/entrain-<dataset>-llama3-<1b|3b>.toml (Qwen2.5-Vision +
Llama3-1b/3b, 64 emulated A40s: TP 2, DP 4, global batch 512, microbatch 4; §4.7.1) this
runs `loom sim` with `disttrain`, `dip` and `entrain` (on 1F1B, and on zero-bubble as
`entrain-zb`: [schedule.entrain] pipeline = zb, §4.5.3) over several
iterations drawn from the dataset-like workload (workload.offset = i x 512), and prints

  - the standard deviation across microbatches (all replicas; 1 % kernel-time noise,
    --jitter) of each component's forward
    time, summed over its pipeline stages (metrics.json `component_forward`, §4.7.4), next
    to the paper's Table 4.3 (ms);
  - the mean throughput (samples/s) over the iterations; the paper gives no absolute
    throughputs (Fig 4.12 is a plot), only "up to 1.40x" for Entrain (§4.7.2).

A scheduler that is not registered (or fails) prints "n/a".

    /usr/bin/python3 analysis/table_4_3.py [--loom build/cli/loom] [--iterations 3]
        [--backend evaluator] [--datasets synthchartnet,...] [--llms 1b,3b] [--jitter 0.01]

The paper's claims are checked cell by cell, with the known exceptions and their causes,
by `analysis/reproduce.py --only diss-T4.3 --check` (ctest: analysis.reproduce.diss-T4.3).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Column label -> (scheduler, extra --set overrides).
SCHEDULERS = {
    "disttrain": ("disttrain", []),
    "dip": ("dip", []),
    "entrain": ("entrain", []),
    "entrain-zb": ("entrain", ["schedule.entrain.pipeline=zb"]),
}
ENTRAIN = ("entrain", "entrain-zb")
# Kernel-time noise for the measured std's floor (core/kernel_jitter.hpp): 1 % relative
# standard deviation per op, the run-to-run variation heterogeneous-parallelism-megatron
# reports for its measurements ("typically below 1%", footnote 6).
JITTER = 0.01
DATASETS = ("synthchartnet", "chartqa", "cocoqa", "llava-150k")  # Table 4.3's column order

# Dissertation Table 4.3 (std of forward time, ms). Its "Vision" row does not name the
# LLM; Loom compares it with the vision encoder of the Llama3-1b configs.
PAPER = {
    ("vision", "disttrain"): (208.07, 61.34, 22.82, 17.98),
    ("vision", "dip"): (102.13, 73.42, 28.79, 14.82),
    ("vision", "entrain"): (19.60, 15.23, 22.11, 8.11),
    ("llm-1b", "disttrain"): (77.92, 61.34, 22.82, 17.98),
    ("llm-1b", "dip"): (37.45, 73.42, 28.79, 14.82),
    ("llm-1b", "entrain"): (18.79, 15.23, 22.11, 8.11),
    ("llm-3b", "disttrain"): (164.55, 35.44, 5.37, 32.92),
    ("llm-3b", "dip"): (84.36, 40.56, 7.77, 33.27),
    ("llm-3b", "entrain"): (40.24, 25.72, 5.52, 31.66),
}


def default_loom():
    candidate = ROOT / "build" / "cli" / "loom"
    return str(candidate) if candidate.exists() else "loom"


def run_once(loom, config, label, backend, offset, out_dir, extra_sets=()):
    scheduler, overrides = SCHEDULERS[label]
    overrides = list(overrides) + list(extra_sets)
    cmd = [loom, "sim", str(config), "--backend", backend, "--no-plot", "-q", "--out", out_dir,
           "--set", f"schedule.name={scheduler}", "--set", f"workload.offset={offset}"]
    for o in overrides:
        cmd += ["--set", o]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    with open(Path(out_dir) / "metrics.json") as f:
        return json.load(f), None


def measure(loom, config, scheduler, backend, iterations, batch, extra_sets=()):
    """Mean over iterations of the std per component (s) and of the throughput."""
    stds, throughputs = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(iterations):
            metrics, error = run_once(loom, config, scheduler, backend, i * batch,
                                      str(Path(tmp) / f"it{i}"), extra_sets)
            if metrics is None:
                return None, error
            throughputs.append(metrics["throughput_samples_per_s"])
            for name, stats in metrics.get("component_forward", {}).items():
                stds.setdefault(name, []).append(stats["std_s"])
    return {"std_ms": {k: 1e3 * sum(v) / len(v) for k, v in stds.items()},
            "throughput": sum(throughputs) / len(throughputs)}, None


def cell(value, fmt="{:8.2f}"):
    return fmt.format(value) if value is not None else "     n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default=default_loom())
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--backend", default="evaluator", choices=("evaluator", "simgrid"))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--llms", default="1b,3b")
    ap.add_argument("--jitter", type=float, default=JITTER,
                    help=f"cost.jitter, kernel-time noise (default {JITTER}: see JITTER)")
    args = ap.parse_args()
    results, errors = {}, {}
    for llm in args.llms.split(","):
        for ds in args.datasets.split(","):
            config = ROOT / "configs" / "paper" / f"entrain-{ds}-llama3-{llm}.toml"
            for s in SCHEDULERS:
                print(f"table_4_3: {config.name} {s}", file=sys.stderr)
                results[(llm, ds, s)], errors[(llm, ds, s)] = measure(
                    args.loom, config, s, args.backend, args.iterations, 512,
                    [f"cost.jitter={args.jitter}"])
    datasets = args.datasets.split(",")
    print(f"Table 4.3 (std of forward time across microbatches, ms): Loom | paper; "
          f"{args.iterations} iterations, {args.backend}")
    print(f"{'row':<22}" + "".join(f"{d:>22}" for d in datasets))
    for llm in args.llms.split(","):
        for comp in ("vision", "llm"):
            paper_key = "vision" if comp == "vision" else f"llm-{llm}"
            for s in SCHEDULERS:
                line = f"{comp + ' (' + llm + ') ' + s:<22}"
                for d in datasets:
                    r = results[(llm, d, s)]
                    mine = r["std_ms"].get(comp) if r else None
                    paper = PAPER.get((paper_key, "entrain" if s in ENTRAIN else s))
                    theirs = paper[DATASETS.index(d)] if paper and d in DATASETS else None
                    line += f"{cell(mine)} | {cell(theirs)}  "
                print(line)
    print("\nThroughput (samples/s, mean over iterations); paper: Entrain up to 1.40x (Fig 4.12)")
    print(f"{'config':<22}" + "".join(f"{s:>12}" for s in SCHEDULERS))
    for llm in args.llms.split(","):
        for d in datasets:
            row = f"{d + ' ' + llm:<22}"
            for s in SCHEDULERS:
                r = results[(llm, d, s)]
                row += f"{r['throughput']:12.2f}" if r else f"{'n/a':>12}"
            print(row)
    missing = sorted({f"{s}: {e}" for (llm, d, s), e in errors.items() if e})
    for m in missing:
        print(f"n/a {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
