"""Dissertation ch. 4 (Entrain): Table 4.3 (variability of each modality's forward time
across microbatches) and Fig 4.12's "up to 1.40x" throughput claim, on the eight
dataset x Llama3 configs."""
from __future__ import annotations

from table_4_3 import DATASETS, JITTER, PAPER, measure

from .cells import Cause, Cell, Context, Table, paper_config

BASELINES = ("disttrain", "dip")
VARIANTS = ("entrain", "entrain-zb")
BATCH = 512  # global batch; iteration i reads the dataset from offset i x 512


def run_table_4_3(ctx: Context) -> list[Cell]:
    iterations = 3  # quick mode runs fewer configs, not fewer iterations: same cells
    llms = ("1b",) if ctx.quick else ("1b", "3b")
    datasets = DATASETS[:1] if ctx.quick else DATASETS
    results = {}
    for llm in llms:
        for ds in datasets:
            config = paper_config(f"entrain-{ds}-llama3-{llm}.toml")
            for s in BASELINES + VARIANTS:
                ctx.log(f"reproduce: diss-T4.3 {config.name} {s}")
                r, error = measure(ctx.loom, config, s, ctx.backend, iterations, BATCH,
                                   [f"cost.jitter={JITTER}"] + ctx.sets)
                if r is None:
                    raise RuntimeError(f"diss-T4.3 {config.name} {s}: {error}")
                results[(llm, ds, s)] = r
    cells = []
    for llm in llms:
        for ds in datasets:
            col = DATASETS.index(ds)
            components = ("vision", "llm") if llm == "1b" else ("llm",)
            for comp in components:
                key = "vision" if comp == "vision" else f"llm-{llm}"
                label = "Vision" if comp == "vision" else f"Llama3-{llm}"
                for s in BASELINES + ("entrain",):
                    versus = ([f"{label} / {ds} / {b}" for b in BASELINES]
                              if s == "entrain" else [])
                    cells.append(Cell("diss-T4.3", f"{label} / {ds} / {s}",
                                      PAPER[(key, s)][col],
                                      results[(llm, ds, s)]["std_ms"].get(comp), "ms std",
                                      "analytical", versus=versus,
                                      note=("paper: this row repeats the Vision row in 3 of 4 "
                                            "columns" if key == "llm-1b" else "")))
    # Fig 4.12: no per-bar numbers; the text claims Entrain is the fastest and "up to
    # 1.40x" faster (§4.7.2).
    best_ratio = 0.0
    for llm in llms:
        for ds in datasets:
            entrain = max(results[(llm, ds, v)]["throughput"] for v in VARIANTS)
            baseline = max(results[(llm, ds, b)]["throughput"] for b in BASELINES)
            slowest = min(results[(llm, ds, b)]["throughput"] for b in BASELINES)
            best_ratio = max(best_ratio, entrain / slowest)
            cells.append(Cell("diss-F4.12", f"Llama3-{llm} / {ds} / Entrain over best baseline",
                              None, entrain / baseline, "x", "analytical",
                              claim="Entrain has the highest throughput",
                              claim_holds=entrain >= baseline))
    cells.append(Cell("diss-F4.12", "max Entrain speedup over a baseline", 1.40, best_ratio,
                      "x", "analytical", claim="up to 1.40x",
                      note="over the configs run (--quick: SynthChartNet 1b only)"))
    return cells


STD_SPREAD = Cause(
    "seed-silent",
    "the std rests on two inputs the seed does not give: the datasets' token distributions "
    "(Fig 4.3 shows them only as CDF plots; Loom's generators, core/workload_gen.cpp, are "
    "reconstructions) and the run-to-run noise of the paper's measurements (on CocoQA its "
    "three schedulers' stds are within 1.5x of each other, Loom's 8-10x apart, as a floor "
    "of noise would make them; Loom adds 1 % kernel noise)")

TABLE_4_3 = Table(
    id="diss-T4.3",
    title="Standard deviation of each modality's forward time across microbatches",
    source="dissertation §4.7.4, Table 4.3; §4.7.2, Fig 4.12",
    run=run_table_4_3,
    accepts_sets=True,
    about=("Qwen2.5-Vision + Llama3-1b/3b on 64 emulated A40s (TP 2, DP 4, global batch "
           "512, microbatch 4), configs/paper/entrain-<dataset>-llama3-<1b|3b>.toml, each "
           "scheduler over three iterations of the dataset-like workload. Loom's Entrain "
           "cell is the 1F1B variant; the throughput claim takes the faster of Entrain on "
           "1F1B and on zero-bubble (`schedule.entrain.pipeline = zb`). DIP runs its root "
           "order unsearched, every encoder forward before the LLM, as §4.7.2 says the "
           "dissertation's DIP did (the configs' `[schedule.dip] search_iterations = 0`; "
           "with DIP's search on, Loom's DIP is 2-3 % ahead of Entrain on SynthChartNet "
           "and LLaVA-150k 1b). The paper's Vision "
           "row does not name the LLM; it is compared with the Llama3-1b configs. Kernel "
           "times carry 1 % noise (`cost.jitter = 0.01`, normal, per op: the run-to-run "
           "variation heterogeneous-parallelism-megatron reports), so no std is exactly 0."),
    causes={f"/ {s}": STD_SPREAD for s in BASELINES + ("entrain",)},
    known_reversals={
        "Llama3-3b / cocoqa / entrain": Cause(
            "seeds-disagree",
            "the paper's one exception to its claim (DistTrain 5.37 < Entrain 5.52 ms); "
            "Loom's Entrain is the lowest here too"),
    },
)
