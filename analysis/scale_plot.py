"""Runs and plots the scale benchmark (bench/run_scale.sh): end-to-end time and peak RSS
of `loom sim --bench` against the GPU count, per backend, folded and unfolded, and of
unfolded SimGrid runs that write every output file (`loom sim --no-plot`, the files
deleted after each run), with the exponent of a least-squares fit of log(time) on
log(GPUs) for each series."""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

PP, GPUS_PER_NODE = 16, 8

# --fabric fat-tree: a three-tier Clos of 64-port switches (docs/fabrics.md): 4 nodes (32
# NICs) per leaf, 32 leaves (1,024 GPUs) per pod, the core tier 1:7 as Llama 3's.
FABRICS = {
    "star": [],
    "fat-tree": ["cluster.fabric.kind=\"fat-tree\"", "cluster.fabric.nodes_per_leaf=4",
                 "cluster.fabric.leaves_per_pod=32", "cluster.fabric.oversubscription=[1, 7]"],
}


def sim_command(loom, config, gpus, backend, fabric):
    cmd = [loom, "sim", config, "-q", "--backend", backend, "--set", f"parallel.dp={gpus // PP}",
           "--set", f"cluster.nodes={gpus // GPUS_PER_NODE}"]
    for override in FABRICS[fabric]:
        cmd += ["--set", override]
    return cmd


def run_writing(loom, config, gpus, fabric, out):
    """One unfolded SimGrid run as a user runs it: every file written (no plots). Peak RSS is
    the child's own (wait4), the time the whole process's."""
    files = os.path.join(out, "run-files")
    cmd = sim_command(loom, config, gpus, "simgrid", fabric) + [
        "--no-fold", "--no-plot", "--force", "--out", files]
    start = time.perf_counter()
    with open(os.path.join(out, "run-files.log"), "w") as log:
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"scale_plot: {' '.join(cmd)} failed: see {out}/run-files.log")
    with open(os.path.join(files, "metrics.json")) as f:
        iteration_s = json.load(f)["iteration_time_s"]
    written = sum(os.path.getsize(os.path.join(files, n)) for n in os.listdir(files))
    shutil.rmtree(files)
    return {"gpus": gpus, "backend": "simgrid", "folded": False, "outputs_written": True,
            "end_to_end_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "iteration_time_s": iteration_s, "bytes_written": written}


def run(loom, config, gpus, backend, fold, fabric="star"):
    cmd = sim_command(loom, config, gpus, backend, fabric) + ["--bench"]
    if not fold:
        cmd.append("--no-fold")
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"scale_plot: {' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    row = json.loads(done.stdout)
    row.update({"end_to_end_s": wall, "folded": fold})
    return row


def median_run(repeat, one_run):
    """The run of `repeat` whose end-to-end time is the median (the virtual machine's speed
    drifts by +-20 % between runs); every run's time is kept in end_to_end_runs_s."""
    rows = sorted((one_run() for _ in range(repeat)), key=lambda r: r["end_to_end_s"])
    row = rows[len(rows) // 2]
    row["end_to_end_runs_s"] = [r["end_to_end_s"] for r in rows]
    return row


def exponent(rows):
    pts = [(math.log(r["gpus"]), math.log(r["end_to_end_s"])) for r in rows]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--loom", default="build/cli/loom")
    ap.add_argument("--config", default="configs/bench/pp16-dp64.toml")
    ap.add_argument("--out", default="out/bench-scale")
    ap.add_argument("--unfolded-max", type=int, default=4096)
    ap.add_argument("--sizes", default="1024,4096,16384,65536")
    ap.add_argument("--fabric", default="star", choices=sorted(FABRICS),
                    help="the cluster's fabric (fat-tree: 3 tiers, pods of 1,024 GPUs, core 1:7)")
    ap.add_argument("--no-outputs", action="store_true",
                    help="skip the unfolded SimGrid runs that write every file")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each point this many times and keep the median (default 1)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    series = {}
    print("| GPUs | backend | replicas simulated | end-to-end s | planning s | backend s | peak RSS MiB | iteration s |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for fold in (True, False):
        for backend in ("evaluator", "simgrid"):
            for gpus in sizes:
                if not fold and gpus > args.unfolded_max:
                    continue
                r = median_run(args.repeat, lambda: run(args.loom, args.config, gpus, backend,
                                                        fold, args.fabric))
                series.setdefault(f"{backend} {'folded' if fold else 'unfolded'}", []).append(r)
                print(f"| {gpus:,} | {backend} | {r['simulated_replicas']} of {r['replicas']} | "
                      f"{r['end_to_end_s']:.2f} | {r['planning_s']:.2f} | {r['wall_s']:.3f} | "
                      f"{r['peak_rss_bytes'] / 2**20:.0f} | {r['iteration_time_s']:.4f} |", flush=True)
    os.makedirs(args.out, exist_ok=True)
    for gpus in ([] if args.no_outputs else [g for g in sizes if g <= args.unfolded_max]):
        r = median_run(args.repeat,
                       lambda: run_writing(args.loom, args.config, gpus, args.fabric, args.out))
        series.setdefault("simgrid unfolded, every file written", []).append(r)
        print(f"| {gpus:,} | simgrid, every file ({r['bytes_written'] / 1e9:.2f} GB) | all | "
              f"{r['end_to_end_s']:.2f} | - | - | {r['peak_rss_bytes'] / 2**20:.0f} | "
              f"{r['iteration_time_s']:.4f} |", flush=True)
    fits = {name: exponent(rows) for name, rows in series.items()}
    for name, k in fits.items():
        if k is not None:
            print(f"fitted exponent of end-to-end time vs GPUs, {name}: {k:.2f}")
    with open(os.path.join(args.out, "scale.json"), "w") as f:
        json.dump({"rows": [r for rows in series.values() for r in rows], "exponents": fits}, f, indent=2)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in series.items():
        k = fits[name]
        label = name + (f" (exponent {k:.2f})" if k is not None else "")
        style = ":^" if "every file" in name else "--s" if "unfolded" in name else "-o"
        g = [r["gpus"] for r in rows]
        ax_t.plot(g, [r["end_to_end_s"] for r in rows], style, label=label)
        ax_m.plot(g, [r["peak_rss_bytes"] / 2**20 for r in rows], style, label=name)
    for ax, ylabel in ((ax_t, "end-to-end time, s"), (ax_m, "peak resident memory, MiB")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs (PP 16, DP = GPUs / 16)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"loom sim, configs/bench/pp16-dp64.toml scaled by DP, {args.fabric} fabric")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "scale.png"), dpi=120)
    print(f"wrote {args.out}/scale.json and scale.png")


if __name__ == "__main__":
    main()
