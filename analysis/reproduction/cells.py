"""The record every reproduced table is made of, and the rules that judge it.

A Cell is one number the paper prints (or one claim it makes) beside Loom's answer for the
same setup. Two judgements per cell, both None where they do not apply:

  within_15pct  |loom / paper - 1| <= 0.15 (only where the paper prints a number in the
                same unit as Loom's);
  claim_holds   the direction the paper shows between this cell and each cell in
                `versus` (which of the two is larger) is the direction Loom shows. Where
                the paper's two numbers are within 1% of each other it claims a tie,
                and Loom holds it when its two are within 5%.

`mode` says where Loom's number comes from, never mixed within one cell:
  analytical           Loom's cost model from first principles (FLOPs, bytes, presets);
  calibrated           per-kernel or per-layer times the paper itself measured;
  measured-throughput  the paper's measured iteration throughput by node count (Oobleck's
                       artifact tables); only the failure and reconfiguration timeline
                       is Loom's.
"""
from __future__ import annotations

import json
import os
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
MODES = ("analytical", "calibrated", "measured-throughput")
TIE = 0.01         # paper numbers this close claim a tie
TIE_SLACK = 0.05   # ... which Loom holds within this
MAGNITUDE = 0.15
UNEXPLAINED = "not explained yet"

# Where a miss's fix lies, by what its cause says. The page counts the misses by kind and
# bounds what fixing the rest could reach: no change to Loom removes a seeds-disagree
# miss, and a seed-silent one only by guessing what the seeds leave out.
CAUSE_KINDS = {
    "seeds-disagree": "the seed's own numbers disagree with each other, with its own "
                      "account of the system, or with another seed's, so no one setup "
                      "matches them all",
    "seed-silent": "the cell rests on an input the seeds do not state (a size, a setting, a "
                   "dataset's distribution), which Loom would have to guess",
    "measured-kernel": "the paper measured a kernel's or a runtime's speed no "
                       "first-principles model gives; a calibrated cell could take it from "
                       "the paper",
    "model": "Loom's model or its reading of the paper: the fix belongs in Loom",
    "unexplained": "not explained yet (the cause says what is seen)",
}


@dataclass(frozen=True)
class Cause:
    """One line on why a cell misses, and its kind (CAUSE_KINDS)."""
    kind: str
    text: str

    def __post_init__(self):
        if self.kind not in CAUSE_KINDS:
            raise ValueError(f"unknown cause kind {self.kind!r} (known: "
                             f"{', '.join(CAUSE_KINDS)})")
        if (self.kind == "unexplained") != self.text.startswith(UNEXPLAINED):
            raise ValueError(f"a cause starts {UNEXPLAINED!r} exactly when its kind is "
                             f"'unexplained': {self.kind} / {self.text[:40]!r}")


def kind_of(why: Cause | None) -> str | None:
    return why.kind if why is not None else None


@dataclass
class Cell:
    table: str
    cell: str
    paper: float | None
    loom: float | None
    unit: str
    mode: str
    versus: list[str] = field(default_factory=list)
    claim: str = ""          # the paper's claim in words, when it is not just "the order"
    claim_holds: bool | None = None
    within_15pct: bool | None = None
    # Why it misses (set by attach_causes): one Cause for a reversed direction, one for a
    # magnitude off by more than 15 % (often the same).
    reversal: Cause | None = None
    magnitude: Cause | None = None
    note: str = ""
    # A calibrated table's one cell whose paper number the calibration took: equal by
    # construction, so never judged within 15 %.
    calibration_point: bool = False

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"{self.table} {self.cell}: unknown mode {self.mode!r}")

    @property
    def ratio(self) -> float | None:
        if self.paper in (None, 0) or self.loom is None:
            return None
        return self.loom / self.paper

    @property
    def missed(self) -> bool:
        return self.claim_holds is False or self.within_15pct is False

    @property
    def causes(self) -> list[Cause]:
        """The reversal's and the magnitude's causes, each distinct one once."""
        return list(dict.fromkeys(w for w in (self.reversal, self.magnitude) if w is not None))

    @property
    def cause(self) -> str:
        return "; ".join(w.text for w in self.causes)

    def to_json(self) -> dict:
        return {"table": self.table, "cell": self.cell, "paper": self.paper,
                "loom": self.loom, "unit": self.unit, "mode": self.mode,
                "ratio": self.ratio, "versus": self.versus, "claim": self.claim,
                "claim_holds": self.claim_holds, "within_15pct": self.within_15pct,
                "cause": self.cause,
                "reversal_kind": kind_of(self.reversal),
                "magnitude_kind": kind_of(self.magnitude),
                "note": self.note}


def direction(a: float, b: float, tie: float) -> int:
    """+1 when a > b, -1 when a < b, 0 when they are within `tie` of each other."""
    if abs(a - b) <= tie * max(abs(a), abs(b)):
        return 0
    return 1 if a > b else -1


def judge(cells: list[Cell]) -> None:
    """Fills in within_15pct and claim_holds (for cells that do not set it themselves)."""
    by_name = {c.cell: c for c in cells}
    for c in cells:
        if c.paper is not None and c.loom is not None and c.paper != 0 and \
                not c.calibration_point:
            c.within_15pct = abs(c.loom / c.paper - 1) <= MAGNITUDE
        if not c.versus or c.claim_holds is not None:
            continue
        verdicts = []
        for name in c.versus:
            other = by_name.get(name)
            if other is None:
                raise KeyError(f"{c.table}: {c.cell} compares with unknown cell {name!r}")
            if None in (c.paper, c.loom, other.paper, other.loom):
                continue
            paper = direction(c.paper, other.paper, TIE)
            loom = direction(c.loom, other.loom, TIE_SLACK if paper == 0 else 0.0)
            verdicts.append(paper == loom)
        c.claim_holds = all(verdicts) if verdicts else None


def attach_causes(cells: list[Cell], table: "Table") -> None:
    """A missing cell's causes: for a reversed direction its entry in
    table.known_reversals; for a magnitude off by more than 15 % the first key of
    table.causes (a substring of cell names) found in its name."""
    for c in cells:
        if c.claim_holds is False:
            c.reversal = _checked(table, c, table.known_reversals.get(c.cell))
        if c.within_15pct is False:
            c.magnitude = _checked(table, c, next(
                (why for key, why in table.causes.items() if key in c.cell), None))


def _checked(table: "Table", c: Cell, why) -> Cause | None:
    if why is not None and not isinstance(why, Cause):
        raise TypeError(f"{table.id}: the cause of {c.cell!r} is not a Cause(kind, text)")
    return why


@dataclass
class Context:
    loom: str
    scratch: Path
    quick: bool
    backend: str = "evaluator"
    log: Callable[[str], None] = print
    # `--set KEY=VALUE` overrides added to every config the tables run (reproduce.py --set;
    # only tables with Table.accepts_sets run with any).
    sets: list[str] = field(default_factory=list)

    # One run per distinct command line: tables that share a run (Table 2.4's Varuna and
    # Oobleck cells are Table 2.2's, Fig 3.6's Megatron* is Table 3.2's unaware view) read it
    # once. Command line -> its output folder.
    runs: dict[tuple[str, ...], Path] = field(default_factory=dict)
    stdouts: dict[tuple[str, ...], str] = field(default_factory=dict)  # printed()'s runs

    def _run(self, args: list[str]) -> str:
        """`loom ARGS`'s stdout; LoomFailed (the table fails, the page goes on) if it exits
        non-zero."""
        done = subprocess.run([self.loom] + args, capture_output=True, text=True)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
            raise LoomFailed(f"loom {' '.join(args)} exited {done.returncode}: {tail[0]}",
                             done.returncode)
        return done.stdout

    def output_of(self, args: list[str]) -> Path:
        """Runs `loom ARGS --out <scratch folder>` once per distinct ARGS; its folder."""
        key = tuple(args)
        if key not in self.runs:
            out = self.scratch / f"run-{len(self.runs)}"
            self._run(args + ["-q", "--force", "--out", str(out)])
            self.runs[key] = out
        return self.runs[key]

    def printed(self, args: list[str]) -> str:
        """What `loom ARGS` prints; run once per distinct ARGS."""
        key = tuple(args)
        if key not in self.stdouts:
            self.stdouts[key] = self._run(args)
        return self.stdouts[key]

    def printed_json(self, args: list[str]) -> dict:
        """What `loom ARGS` prints (ARGS ask for --json), parsed."""
        return json.loads(self.printed(args))

    def resolved_config(self, config: str | Path) -> dict:
        """CONFIG as `loom config` resolves it (presets expanded, defaults filled in)."""
        return tomllib.loads(self.printed(["config", str(config)] + self._set_args([])))

    def sim_output(self, config: str | Path, sets: list[str],
                   backend: str | None = None) -> Path:
        """The folder of `loom sim CONFIG --set ...` (metrics.json, timeline.csv, ...)."""
        return self.output_of(["sim", str(config), "--backend", backend or self.backend,
                               "--no-plot"] + self._set_args(sets))

    def _set_args(self, sets: list[str]) -> list[str]:
        """`--set` arguments for SETS, then the run's own overrides (which win)."""
        return [a for s in sets + self.sets for a in ("--set", s)]

    def sim(self, config: str | Path, sets: list[str], backend: str | None = None) -> dict:
        """`loom sim`'s metrics.json."""
        return json.loads((self.sim_output(config, sets, backend) / "metrics.json").read_text())

    def replay(self, config: str | Path, trace: str | Path, policy: str, sets: list[str],
               extra: list[str] | None = None) -> dict:
        """`loom replay`'s summary.json."""
        out = self.output_of(["replay", str(config), "--trace", str(trace), "--policy", policy]
                             + (extra or []) + [a for s in sets for a in ("--set", s)])
        return json.loads((out / "summary.json").read_text())


class LoomFailed(RuntimeError):
    def __init__(self, message: str, returncode: int = 1):
        super().__init__(message)
        self.returncode = returncode  # 2: bad input, 3: infeasible (e.g. out of memory)


def check_directions(cells: list[Cell], table: "Table") -> list[str]:
    """What `--check` reports: reversals not known, and known ones that now hold."""
    problems = []
    for c in cells:
        known = c.cell in table.known_reversals
        if c.claim_holds is False and not known:
            problems.append(f"{table.id}: {c.cell}: the paper's direction is reversed")
        if c.claim_holds is True and known:
            problems.append(f"{table.id}: {c.cell}: now holds; remove it from "
                            "known_reversals")
    return problems


@dataclass
class Table:
    id: str              # e.g. "diss-T2.2"
    title: str
    source: str          # where in the seeds: "dissertation §2.7.2, Table 2.2"
    run: Callable[[Context], list[Cell]]
    causes: dict[str, Cause] = field(default_factory=dict)
    # Cells whose direction Loom reverses, each with its cause. `reproduce.py --check`
    # fails on a reversal not listed here, and on a listed one that no longer reverses.
    known_reversals: dict[str, Cause] = field(default_factory=dict)
    about: str = ""      # setup and reading of the paper, one paragraph
    # Whether reproduce.py --set may override its configs: true where Loom's numbers come
    # from its cost model (a what-if on the cost assumptions), false where a config carries
    # constants calibrated to the paper (an override would break the calibration).
    accepts_sets: bool = False


def paper_config(name: str) -> Path:
    return ROOT / "configs" / "paper" / name


def merged_tokens(resolved: dict, modality: str, encoder: str) -> float:
    """One sample's `modality` tokens as they reach the LLM, in a config as `loom config`
    resolves it: the workload's count times `encoder`'s token_ratio (a 2x2 merge: 0.25)."""
    modules = {m["name"]: m for m in resolved["model"]["modules"]}
    return resolved["workload"]["tokens"][modality] * modules[encoder].get("token_ratio", 1)


def env_loom() -> str:
    for candidate in (os.environ.get("LOOM"), ROOT / "build" / "cli" / "loom"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return "loom"
