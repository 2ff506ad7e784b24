"""Writes the reproduction page, its summary and one figure per table."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from .cells import CAUSE_KINDS, MAGNITUDE, Cell, Table, kind_of


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"


def verdict(flag: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[flag]


def tally(cells: list[Cell]) -> dict:
    claims = [c for c in cells if c.claim_holds is not None]
    sized = [c for c in cells if c.within_15pct is not None]
    errors = [abs(c.ratio - 1) for c in cells if c.ratio is not None]
    return {"claims": len(claims), "claims_hold": sum(c.claim_holds for c in claims),
            "sized": len(sized), "within": sum(c.within_15pct for c in sized),
            "median_error": statistics.median(errors) if errors else None,
            "misses": sum(c.missed for c in cells),
            "uncaused": sum(c.missed and not explained(c) for c in cells)}


def explained(c: Cell) -> bool:
    """A miss whose every part has a known cause (an unexplained one only says what is
    seen)."""
    return all(why is not None and why.kind != "unexplained"
               for why, missed in ((c.reversal, c.claim_holds is False),
                                   (c.magnitude, c.within_15pct is False)) if missed)


def reach(cells: list[Cell], staying: tuple[str, ...],
          staying_analytical: tuple[str, ...] = ()) -> dict:
    """The most the page could show if every miss were fixed but those whose cause is of
    a kind in `staying`, or, in an analytical cell, in `staying_analytical` (a miss
    without a cause counts as fixable)."""
    t = tally(cells)

    def stays(c: Cell, why) -> bool:
        kind = kind_of(why)
        return kind in staying or (c.mode == "analytical" and kind in staying_analytical)

    return {"claims_hold": t["claims_hold"] + sum(
                c.claim_holds is False and not stays(c, c.reversal) for c in cells),
            "within": t["within"] + sum(
                c.within_15pct is False and not stays(c, c.magnitude) for c in cells)}


def kind_lines(cells: list[Cell]) -> list[str]:
    """The reversed claims and the cells off by more than 15 %, by the kind of their
    cause, as a markdown table."""
    rows = ["| kind of cause | what it means | claims reversed | cells off by more than "
            "15 % |", "|---|---|---:|---:|"]
    for kind, meaning in [*CAUSE_KINDS.items(), (None, "no cause given")]:
        reversed_ = sum(c.claim_holds is False and kind_of(c.reversal) == kind for c in cells)
        off = sum(c.within_15pct is False and kind_of(c.magnitude) == kind for c in cells)
        if kind or reversed_ or off:
            rows.append(f"| {kind or '-'} | {meaning} | {reversed_} | {off} |")
    return rows


def reach_line(cells: list[Cell]) -> str:
    t = tally(cells)
    beyond_loom = ("seeds-disagree", "seed-silent")
    disagree = reach(cells, ("seeds-disagree",))
    both = reach(cells, beyond_loom)
    # An analytical cell prices kernels from first principles by definition (cells.py):
    # a speed only the paper's measurement gives stays a miss there, whatever Loom fixes.
    first = reach(cells, beyond_loom, staying_analytical=("measured-kernel",))
    return (f"- By this page's kinds of cause: if every miss were fixed but those whose cause "
            f"is that the seeds' own numbers disagree, the direction would hold on at most "
            f"{share(disagree['claims_hold'], t['claims'])} claims and at most "
            f"{share(disagree['within'], t['sized'])} cells would be within 15 %; if the "
            f"misses that rest on an input the seeds do not state stayed too (Loom would "
            f"have to guess it), at most {share(both['claims_hold'], t['claims'])} and "
            f"{share(both['within'], t['sized'])}; if the analytical cells that miss a "
            f"kernel speed only the paper's measurement gives stayed as well (first "
            f"principles cannot give it; the calibrated cells take it from the paper where "
            f"the seed prints it), at most {share(first['claims_hold'], t['claims'])} and "
            f"{share(first['within'], t['sized'])}.")


def cause_text(c: Cell) -> str:
    """The cell's causes as the page prints them: each with its kind in italics (an
    unexplained one says so in its words)."""
    return "; ".join(w.text if w.kind == "unexplained" else f"*{w.kind}*: {w.text}"
                     for w in c.causes)


def log_error(c: Cell) -> float:
    """How far off a cell is, symmetric in over- and under-prediction (3x = 1/3x)."""
    return math.inf if c.ratio <= 0 else abs(math.log(c.ratio))


def share(n: int, d: int) -> str:
    return f"{n} of {d} ({100 * n / d:.0f} %)" if d else "none"


def summary_lines(tables: list[Table], cells: list[Cell], owner) -> list[str]:
    t = tally(cells)
    lines = [f"- All tables: the paper's direction holds on {share(t['claims_hold'], t['claims'])}"
             f" claims; the magnitude is within 15 % on {share(t['within'], t['sized'])} cells;"
             f" {t['misses']} cells miss, {t['misses'] - t['uncaused']} of them with a known "
             "cause.", reach_line(cells)]
    for table in tables:
        mine = [c for c in cells if owner(c.table) == table.id]
        if not mine:
            continue
        for mode in sorted({c.mode for c in mine}):
            part = [c for c in mine if c.mode == mode]
            s = tally(part)
            worst = max((c for c in part if c.ratio is not None), key=log_error, default=None)
            text = (f"- {table.source} ({mode}): direction {share(s['claims_hold'], s['claims'])}"
                    f", within 15 % {share(s['within'], s['sized'])}")
            if s["median_error"] is not None:
                text += f", median error {100 * s['median_error']:.1f} %"
            if worst is not None:
                text += (f", worst {worst.cell} ({fmt(worst.loom)} vs {fmt(worst.paper)} "
                         f"{worst.unit})")
            lines.append(text + ".")
    return lines


def write_summary(path: Path, tables: list[Table], cells: list[Cell], owner) -> None:
    path.write_text("\n".join(summary_lines(tables, cells, owner)) + "\n")


def write_page(path: Path, tables: list[Table], cells: list[Cell], not_compared, failures,
               quick: bool, owner, sets: list[str] = ()) -> None:
    overrides = " ".join(f"--set {s}" for s in sets)
    out = ["# The seed papers' tables beside Loom's numbers", "",
           ("Generated by `/usr/bin/python3 analysis/reproduce.py --out docs/reproduction "
            "--force --update-readme`" if not sets else
            f"Generated by `analysis/reproduce.py {overrides}` (**every config of these "
            "tables run with these overrides: a what-if, not the checked-in page**)")
           + (" (**--quick: reduced size, not the full tables**)" if quick else "")
           + "; do not edit by hand. Each cell is one number the paper prints beside Loom's "
           "answer for the same setup. *Claim holds*: the order the paper shows between this "
           "cell and the cells it is compared with (which is larger; a tie when the paper's "
           "two are within 1 %) is Loom's order. *Within 15 %*: |Loom / paper - 1| <= "
           f"{MAGNITUDE:.2f}. *Mode* says where Loom's number comes from: `analytical` (Loom's "
           "cost model: its kernel-level model, every constant cited, for the hetero paper's "
           "Megatron-LM runs; the Cornstarch and Entrain configs, whose systems run on "
           "HuggingFace Transformers, price FLOPs at a fixed fraction of the A40's peak, "
           "`cost.efficiency` 0.45, a round assumption written before the kernel-level model "
           "and not taken from a source; `--set cost.efficiency=0` runs them under the "
           "kernel-level model instead), `calibrated` (constants fitted to the paper's own "
           "measurements), "
           "`measured-throughput` (the paper's measured throughput by node count; only the "
           "failure timeline is Loom's).",
           "", "## Summary", ""]
    out += summary_lines(tables, cells, owner)
    t = tally(cells)
    out += ["", f"Cells that miss (direction or magnitude): {t['misses']}; with a known cause: "
            f"{t['misses'] - t['uncaused']}; the rest say what is seen and that the cause is "
            "not explained yet. By the kind of their cause:", ""]
    out += kind_lines(cells) + [""]
    for table in tables:
        mine = [c for c in cells if owner(c.table) == table.id]
        out += [f"## {table.id}: {table.title}", "", f"*{table.source}.* {table.about}", ""]
        if table.id in failures:
            out += [f"**Failed to run:** {failures[table.id]}", ""]
        if not mine:
            out += ["Not run.", ""]
            continue
        out += [f"![Loom / paper per cell]({table.id}.png)", "",
                "| cell | paper | Loom | unit | Loom / paper | mode | compared with | "
                "claim holds | within 15 % | cause of a miss / note |",
                "|---|---:|---:|---|---:|---|---|---|---|---|"]
        for c in mine:
            why = "; ".join(x for x in (cause_text(c), c.note, c.claim) if x)
            versus = ", ".join(v.split(" / ")[-1] for v in c.versus)
            out.append(f"| {c.cell} | {fmt(c.paper)} | {fmt(c.loom)} | {c.unit} | "
                       f"{fmt(c.ratio)} | {c.mode} | {versus} | {verdict(c.claim_holds)} | "
                       f"{verdict(c.within_15pct)} | {why} |")
        out.append("")
    out += ["## Not compared cell by cell", "",
            "| seed table / figure | what | why not, or where it is covered |", "|---|---|---|"]
    out += [f"| {i} | {what} | {why} |" for i, what, why in not_compared]
    path.write_text("\n".join(out) + "\n")


def plot_table(table: Table, cells: list[Cell], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cells if c.ratio is not None]
    if not shown:
        return
    height = max(2.5, 0.22 * len(shown) + 1.2)
    fig, ax = plt.subplots(figsize=(8, height))
    ys = list(range(len(shown)))
    colors = ["#c0392b" if c.claim_holds is False else
              "#2e86c1" if c.within_15pct else "#e67e22" for c in shown]
    positive = [c.ratio for c in shown if c.ratio > 0]
    floor = min(positive + [1 - MAGNITUDE]) / 1.5  # where a ratio of 0 is drawn
    ratios = [c.ratio if c.ratio > 0 else floor for c in shown]
    # A lollipop from 1 (agreement) to each cell's Loom / paper; a cross where Loom is 0.
    ax.hlines(ys, [1.0] * len(ys), ratios, colors=colors, lw=2)
    for y, r, c, color in zip(ys, ratios, shown, colors):
        ax.plot(r, y, "x" if c.ratio <= 0 else "o", color=color, ms=5)
    ax.set_xlim(floor / 1.3, max(ratios + [1 + MAGNITUDE]) * 1.3)
    ax.axvspan(1 - MAGNITUDE, 1 + MAGNITUDE, color="#d5f5e3", zorder=0)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([c.cell for c in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("Loom / paper (log; green band: within 15 %; red: the paper's order is "
                  "reversed; x: Loom is 0)", fontsize=8)
    ax.set_title(f"{table.id}: {table.title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
