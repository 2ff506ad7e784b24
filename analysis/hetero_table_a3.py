#!/usr/bin/env python3
"""Table A3 of heterogeneous-parallelism-megatron (1B+7B rows) next to Loom.

Runs `loom sim` on configs/paper/hetero-1b7b-64k-v75-{homogeneous,colocated}.toml with
each row's GPUs, layouts, sequence length, vision share and batch set by --set, with both
backends, and prints the paper's F+B times and gain beside Loom's iteration times and gain.

    python3 analysis/hetero_table_a3.py [--loom build/cli/loom] [--backends evaluator,simgrid]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Table A3, model 1B+7B: (seq, vis %, GPUs, GBS, NMB, H TP/CP/PP/DP, C-E, C-L,
# paper gain %, paper F+B ms H, C).
ROWS = [
    (16384, 50, 16, 8, 2, (2, 2, 1, 4), (1, 1, 1, 16), (2, 2, 1, 4), 6.6, 1300, 1221),
    (16384, 75, 16, 8, 2, (2, 2, 1, 4), (1, 1, 1, 16), (2, 2, 1, 4), 8.5, 1352, 1248),
    (32768, 50, 16, 4, 2, (2, 4, 1, 2), (1, 1, 1, 16), (2, 4, 1, 2), 11.7, 1836, 1644),
    (32768, 75, 16, 4, 2, (2, 4, 1, 2), (1, 1, 1, 16), (2, 4, 1, 2), 20.3, 1980, 1640),
    (65536, 50, 32, 4, 2, (4, 8, 1, 1), (1, 1, 1, 32), (2, 8, 1, 2), 34.3, 3966, 2937),
    (65536, 75, 32, 4, 2, (4, 8, 1, 1), (1, 1, 1, 32), (2, 8, 1, 2), 49.3, 4457, 2973),
    (131072, 50, 64, 4, 2, (4, 16, 1, 1), (1, 1, 1, 64), (2, 16, 1, 2), 17.8, 6321, 5381),
    (131072, 75, 64, 4, 2, (4, 16, 1, 1), (1, 1, 1, 64), (2, 16, 1, 2), 24.8, 6614, 5291),
]

# Table A3's "Peak Mem (GB) H / C" for the same rows, keyed by (seq, vis %): peak max-rank
# memory. The paper is a Megatron-LM extension, whose memory report divides by 1024^2 per
# "MB" (megatron/training/utils.py, report_memory), so its GB are read as GiB.
PEAK_MEMORY_GIB = {
    (16384, 50): (54.5, 50.2), (16384, 75): (59.6, 52.2),
    (32768, 50): (65.3, 50.7), (32768, 75): (75.6, 52.7),
    (65536, 50): (54.0, 48.4), (65536, 75): (68.9, 50.3),
    (131072, 50): (25.1, 48.6), (131072, 75): (26.6, 50.4),
}


def layout_sets(module, layout, gpus):
    tp, cp, pp, dp = layout
    return [f"parallel.modules.{module}.tp={tp}", f"parallel.modules.{module}.cp={cp}",
            f"parallel.modules.{module}.pp={pp}", f"parallel.modules.{module}.dp={dp}",
            f"parallel.modules.{module}.gpus=0-{gpus - 1}"]


# The paper tunes every run to its "best valid throughput configuration", recomputation
# included (§5): a run recomputes its encoder only when it would not fit otherwise, since
# recomputing only costs time. Tried in this order.
ENCODER_RECOMPUTE = ('model.modules.vision.recompute="none"',
                     'model.modules.vision.recompute="full"')


class OutOfMemory(RuntimeError):
    """loom exited 3 (infeasible) because a rank's memory would overflow."""


def out_of_memory(returncode: int, message: str) -> bool:
    return returncode == 3 and "out of memory" in message


def first_that_fits(run_with):
    """run_with(setting) for each ENCODER_RECOMPUTE setting until one does not raise
    OutOfMemory: (its result, whether the encoder recomputes)."""
    for i, recompute in enumerate(ENCODER_RECOMPUTE):
        try:
            return run_with(recompute), i > 0
        except OutOfMemory:
            if i + 1 == len(ENCODER_RECOMPUTE):
                raise


def run(loom, config, sets, backend, out):
    """Iteration time in ms of the fastest run that fits (first_that_fits)."""
    def once(recompute):
        cmd = [loom, "sim", os.path.join(ROOT, "configs/paper", config), "--backend", backend,
               "--out", out, "--force", "--no-plot", "-q"]  # one folder reused for every run
        for s in sets + [recompute]:
            cmd += ["--set", s]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if out_of_memory(done.returncode, done.stderr):
            raise OutOfMemory(done.stderr.strip())
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {done.stderr.strip()}")
    first_that_fits(once)
    with open(os.path.join(out, "metrics.json")) as f:
        return json.load(f)["iteration_time_s"] * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loom", default=os.path.join(ROOT, "build/cli/loom"))
    ap.add_argument("--backends", default="evaluator,simgrid")
    args = ap.parse_args()
    backends = args.backends.split(",")
    head = "| seq | vis% | GPUs | H | C-E | C-L | paper H/C ms | paper gain |"
    for b in backends:
        head += f" {b} H/C ms | {b} gain |"
    print(head)
    print("|" + "---|" * (8 + 2 * len(backends)))
    with tempfile.TemporaryDirectory() as tmp:
        for seq, vis, gpus, gbs, nmb, h, ce, cl, gain, ph, pc in ROWS:
            vision = seq * vis // 100
            common = [f"cluster.nodes={gpus // 8}", f"workload.tokens.vision={vision}",
                      f"workload.tokens.text={seq - vision}", f"schedule.microbatches={nmb}",
                      f"schedule.microbatch_size={gbs // nmb}"]
            fmt = lambda l: "/".join(map(str, l))
            line = (f"| {seq // 1024}K | {vis} | {gpus} | {fmt(h)} | {fmt(ce)} | {fmt(cl)} "
                    f"| {ph:,} / {pc:,} | +{gain} % |")
            for b in backends:
                th = run(args.loom, "hetero-1b7b-64k-v75-homogeneous.toml",
                         common + layout_sets("vision", h, gpus) + layout_sets("llm", h, gpus),
                         b, os.path.join(tmp, "h"))
                tc = run(args.loom, "hetero-1b7b-64k-v75-colocated.toml",
                         common + layout_sets("vision", ce, gpus) + layout_sets("llm", cl, gpus),
                         b, os.path.join(tmp, "c"))
                line += f" {th:,.0f} / {tc:,.0f} | {100 * (th / tc - 1):+.1f} % |"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
