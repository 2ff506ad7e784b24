"""Dissertation ch. 2 (Oobleck): Table 2.2 (throughput under failures) and Table 2.4
(Varuna without checkpoint overhead), by `loom replay` on the paper's failure traces."""
from __future__ import annotations

from table_2_2 import FREQS, MEASURED, PAPER, PAPER_NAME, POLICIES, SIMULATED

from .cells import ROOT, Cause, Cell, Context, Table, paper_config

TRACES = ROOT / "traces" / "oobleck"
# "Varuna (no ckpt)": checkpoint saving removed completely and checkpoints every 2
# iterations instead of 10; the restart (init + loading the checkpoint) is still paid
# (dissertation §2.7.4.3).
NO_CKPT = ["replay.checkpoint_interval=2", "replay.checkpoint_save=0s"]
# Dissertation Table 2.4 (samples/s): Varuna (no ckpt), BERT-Large then GPT-3 6.7b, at
# 6h / 1h / 10m. Its Varuna and Oobleck rows are Table 2.2's.
PAPER_NO_CKPT = {"bert-large": [275.88, 273.85, 264.16], "gpt3-6.7b": [4.61, 4.29, 1.98]}


def name(model: str, freq: str, system: str) -> str:
    return f"{model} / {freq} / {system}"


def throughput_cells(ctx: Context, table: str, rows, config_of, mode: str,
                     extra: list[str]) -> list[Cell]:
    cells = []
    freqs = FREQS[-1:] if ctx.quick else FREQS
    for key, label, paper_index in rows:
        for freq in freqs:
            for policy in POLICIES:
                summary = ctx.replay(config_of(key), TRACES / f"{freq}.csv", policy, [], extra)
                paper = (None if paper_index is None
                         else PAPER[freq][policy][paper_index])
                loom = summary["average_throughput_samples_per_s"]
                system = PAPER_NAME[policy]
                oom = "memory" in summary.get("stopped", {}).get("reason", "")
                versus = ([] if policy == "oobleck"
                          else [name(label, freq, "Oobleck")])
                cell = Cell(table, name(label, freq, system), paper, loom, "samples/s", mode,
                            versus=versus, note="Loom: out of memory" if oom else "")
                if paper is None and paper_index is not None:
                    # "Bamboo was not able to run any GPT-3 model due to lack of memory"
                    cell.versus, cell.claim, cell.claim_holds = [], "out of memory", oom
                cells.append(cell)
    return cells


def run_table_2_2(ctx: Context) -> list[Cell]:
    measured = MEASURED[:1] if ctx.quick else MEASURED
    cells = throughput_cells(ctx, "diss-T2.2", measured,
                             lambda k: paper_config(f"oobleck-{k}-measured.toml"),
                             "measured-throughput", [])
    if not ctx.quick:
        cells += throughput_cells(ctx, "diss-T2.2", SIMULATED,
                                  lambda k: paper_config(f"oobleck-gpt3-{k}.toml"),
                                  "calibrated", ["--backend", ctx.backend])
    return cells


def run_table_2_4(ctx: Context) -> list[Cell]:
    cells = []
    models = [("bert-large", "BERT-Large", 0), ("gpt3-6.7b", "GPT-3 6.7b", 4)]
    freqs = FREQS[-1:] if ctx.quick else FREQS
    for key, label, index in models[:1] if ctx.quick else models:
        config = paper_config(f"oobleck-{key}-measured.toml")
        for freq in freqs:
            col = FREQS.index(freq)
            runs = {
                "Varuna": ("varuna-like", [], PAPER[freq]["varuna-like"][index]),
                "Varuna (no ckpt)": ("varuna-like", NO_CKPT, PAPER_NO_CKPT[key][col]),
                "Oobleck": ("oobleck", [], PAPER[freq]["oobleck"][index]),
            }
            for system, (policy, sets, paper) in runs.items():
                summary = ctx.replay(config, TRACES / f"{freq}.csv", policy, sets)
                versus = {"Varuna": [name(label, freq, "Varuna (no ckpt)"),
                                     name(label, freq, "Oobleck")],
                          "Varuna (no ckpt)": [name(label, freq, "Oobleck")]}.get(system, [])
                cells.append(Cell("diss-T2.4", name(label, freq, system), paper,
                                  summary["average_throughput_samples_per_s"], "samples/s",
                                  "measured-throughput", versus=versus))
    return cells


# Why calibrated Varuna-like trails the paper's Varuna when few nodes fail: the two
# runtimes' measured speeds on the same nodes (bench/replay_steady_state.sh).
VARUNA_RUNTIME = (
    "the artifact measured Varuna's runtime faster than Oobleck's on the same nodes: 1.00-1.21x "
    "Oobleck's measured throughput on 16-27 nodes for 2.7b and 1.03-1.20x for 6.7b (1.06x and "
    "0.95x on 30; traces/oobleck/*throughput_by_nodes.json), though its grid leaves up to 3 "
    "of them idle; both train Table 2.1's microbatches and batch on the same GPUs, and in "
    "Loom's model Varuna-like's grid trains exactly as fast as Oobleck's plan on 16-28 nodes "
    "(`bash bench/replay_steady_state.sh build gpt3-2.7b`, checkpoints off), so the gap is "
    "the two runtimes' speed, which only the measurements give; calibrated mode fits the "
    "cost model on Oobleck's, and the measured-throughput cells, which replay Varuna's own "
    "table, are within 15 %")
VARUNA_EDGE = Cause("measured-kernel", VARUNA_RUNTIME + "; Varuna-like also spends 8-9 % of "
                    "the time saving checkpoints (the configs' replay.checkpoint_save every 10 "
                    "iterations)")
# What the Oobleck artifact's Varuna simulator does that Varuna-like does not (its
# varuna_simulator.py): the job keeps training at full speed through the whole restart
# window, checkpoints the first step after each removal, and counts that work.
VARUNA_RESTART = Cause(
    "seeds-disagree",
    "the paper's Varuna numbers disagree with its own account of Varuna: §2.2.3 says restart "
    "overheads dominate when failures are frequent and §2.7.4.2 that Varuna \"has to fall back "
    "to the last checkpoint\", yet at one failure every 10 minutes its BERT-Large keeps 67 % "
    "of the 6 h throughput (96 % without checkpoints, Table 2.4). They come from the "
    "artifact's Varuna simulator, which keeps training through the 515-701 s restart and "
    "checkpoints the first step after it (docs/replay.md). Varuna-like restarts as the text "
    "describes: it stops for the restart and loses the work since the last checkpoint, so "
    "at 10 minutes it barely reaches a checkpoint")

TABLE_2_2 = Table(
    id="diss-T2.2",
    title="Throughput under one failure every 6 h, 1 h, 10 min (30 nodes)",
    source="dissertation §2.7.2, Table 2.2",
    run=run_table_2_2,
    about=("The five artifact models replay the paper's failure traces "
           "(traces/oobleck/) with each system's measured throughput by node count from the "
           "artifact (measured-throughput; Bamboo-like runs the bamboo schedule for its "
           "memory and failovers); the GPT-3 sizes are also simulated by Loom's backend "
           "(calibrated: each config's cost.efficiency makes Oobleck's first iteration on 30 "
           "nodes match the artifact's measured Oobleck throughput there, so the cells test "
           "what the failures do; GPT-3 350M stands in for the paper's GPT-3 Medium). "
           "Bamboo's GPT-3 "
           "cells are out of memory in the paper."),
    causes={
        "/ 10m / Varuna": VARUNA_RESTART,
        "GPT-3 350M": Cause("model", "GPT-3 350M is Loom's stand-in for the paper's GPT-3 "
                                     "Medium column"),
        **{f"{label} / 1h / Varuna": Cause(
            "measured-kernel",
            VARUNA_RUNTIME + "; the 1 h trace spends most of its time on 16-27 nodes, where "
            "Loom's grid trains at 0.76-0.93x Varuna's measurement")
           for label in ("GPT-3 2.7B", "GPT-3 6.7B")},
    },
    known_reversals={
        "GPT-3 2.7B / 6h / Varuna": VARUNA_EDGE,
    },
)

VARUNA_NO_CKPT_1H = Cause(
    "seeds-disagree",
    "the paper's Varuna (no ckpt) row comes from the artifact's Varuna simulator, which keeps "
    "training through restarts, unlike the Varuna the text describes (§2.7.4.2: it \"has to "
    "fall back to the last checkpoint\"; docs/replay.md): Varuna's own measured table (the "
    "artifact's) is below Oobleck's at 16-29 nodes for 6.7b, and a Varuna that restarts pays "
    "701 s for each of the 1 h trace's failures")

TABLE_2_4 = Table(
    id="diss-T2.4",
    title="Varuna with and without checkpoint overhead, against Oobleck",
    source="dissertation §2.7.4.3, Table 2.4",
    run=run_table_2_4,
    about=("\"Varuna (no ckpt)\" removes checkpoint saving and checkpoints every 2 "
           "iterations instead of 10 (`replay.checkpoint_save = 0`, "
           "`replay.checkpoint_interval = 2`); restarts are still paid. Measured-throughput "
           "configs for BERT-Large and GPT-3 6.7b."),
    causes={"/ 10m / Varuna": VARUNA_RESTART,
            "1h / Varuna (no ckpt)": VARUNA_NO_CKPT_1H},
    known_reversals={
        "GPT-3 6.7b / 1h / Varuna (no ckpt)": VARUNA_NO_CKPT_1H,
    },
)
