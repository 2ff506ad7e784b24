#!/usr/bin/python3
"""Every seed table Loom can express, the papers' numbers beside Loom's, cell by cell.

Runs each table (analysis/reproduction/<paper>.py) and writes, into --out:
  README.md            one page: a section per table (paper cell, Loom cell, ratio, cost
                       mode, whether the paper's claim holds, whether the magnitude is within
                       15 %, and a one-line cause for every miss), then what is not compared
  reproduction.json    every cell (table, cell, paper, loom, unit, mode, ratio, versus,
                       claim, claim_holds, within_15pct, cause, reversal_kind,
                       magnitude_kind, note)
  summary.md           the headline figures the top-level README quotes verbatim
  <table>.png          Loom / paper per cell, with the 15 % band

  /usr/bin/python3 analysis/reproduce.py [--only ID[,ID...]] [--quick] [--out DIR]
      [--loom build/cli/loom] [--backend evaluator|simgrid] [--force] [--json] [--check]
      [--update-readme] [--set KEY=VALUE ...]

--only reruns some tables and keeps the other tables' cells from an existing
DIR/reproduction.json. --quick runs each table at reduced size (what the CI tests do).
--set adds a config override to every run of the tables whose numbers come from Loom's
cost model (a what-if on its assumptions, e.g. --set cost.efficiency=0 for the
kernel-level model); those tables are the default then, and the page says which
overrides it ran with.
The output is staged and renamed into place; an existing DIR needs --force (or --only).
Exit status: 0; 1 when a table failed to run (or, with --check, a direction is reversed
where the table does not list it); 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reproduction import cornstarch, cornstarch_cp, entrain, hetero, oobleck  # noqa: E402
from reproduction.catalogue import NOT_COMPARED  # noqa: E402
from reproduction.cells import (ROOT, Cell, Context, LoomFailed, attach_causes,  # noqa: E402
                                check_directions, env_loom, judge)
from reproduction.page import plot_table, write_page, write_summary  # noqa: E402

TABLES = [oobleck.TABLE_2_2, oobleck.TABLE_2_4, cornstarch.TABLE_3_2, cornstarch.FIGURE_3_6,
          cornstarch_cp.TABLE_3_3, cornstarch_cp.FIGURE_B_1, cornstarch_cp.ARXIV_TABLE_4,
          entrain.TABLE_4_3, hetero.TABLE_A3]


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="tables: " + ", ".join(t.id for t in TABLES))
    ap.add_argument("--only", default="", help="comma-separated table ids (default: all)")
    ap.add_argument("--quick", action="store_true", help="reduced size, as the CI tests")
    ap.add_argument("--out", default=str(Path("out") / "reproduction"),
                    help="output folder (default out/reproduction; the checked-in page is "
                         "docs/reproduction)")
    ap.add_argument("--loom", default=env_loom(), help="the loom binary")
    ap.add_argument("--backend", default="evaluator", choices=("evaluator", "simgrid"))
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--json", action="store_true", help="print the cells as JSON on stdout")
    ap.add_argument("--update-readme", action="store_true",
                    help="also copy summary.md into the top-level README's quoted block")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run of the tables that accept one "
                         "(repeatable; not with --update-readme)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a paper's direction is reversed in a cell the table "
                         "does not list as a known reversal (or a listed one now holds)")
    args = ap.parse_args(argv)
    known = {t.id: t for t in TABLES}
    wanted = [s for s in args.only.split(",") if s]
    unknown = [s for s in wanted if s not in known]
    if unknown:
        ap.error(f"--only: unknown table {', '.join(unknown)}; tables: {', '.join(known)}")
    args.tables = [known[s] for s in wanted] if wanted else TABLES
    args.kind = (args.quick, args.backend, args.sets)  # run_kind() of this run
    if args.sets:
        bad = [s for s in args.sets if "=" not in s]
        if bad:
            ap.error(f"--set: expected KEY=VALUE, got {bad[0]!r}")
        if args.update_readme:
            ap.error("--set: the README quotes the page without overrides; drop "
                     "--update-readme (and write to another --out)")
        fixed = [t.id for t in args.tables if not t.accepts_sets]
        if wanted and fixed:
            ap.error(f"--set: {', '.join(fixed)} run configs calibrated to the paper, which "
                     "an override would break; tables that accept --set: "
                     + ", ".join(t.id for t in TABLES if t.accepts_sets))
        args.tables = [t for t in args.tables if t.accepts_sets]
    if not Path(args.loom).exists() and shutil.which(args.loom) is None:
        ap.error(f"--loom: {args.loom} not found (build Loom: bash scripts/setup.sh)")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.force:
        if not wanted:
            ap.error(f"--out: {out} exists and is not empty; pass --force to replace it")
        if not (out / "reproduction.json").exists():
            ap.error(f"--out: {out} is not an earlier reproduce.py output (no "
                     "reproduction.json) and --only would replace it; pass --force")
    if wanted and (out / "reproduction.json").exists():
        earlier = json.loads((out / "reproduction.json").read_text())
        if run_kind(earlier) != args.kind:
            ap.error(f"--only: {out} holds a run with quick={earlier.get('quick')}, "
                     f"backend={earlier.get('backend')} and overrides "
                     f"{earlier.get('sets', [])}; rerun every table (or use another --out) "
                     "rather than mix the two")
    return args


def run_kind(run: dict) -> tuple:
    """What a reproduction.json was run with; runs of different kinds never mix."""
    return run.get("quick"), run.get("backend"), run.get("sets", [])


def previous_run(out: Path) -> dict:
    """An earlier reproduction.json in --out, or an empty run."""
    previous = out / "reproduction.json"
    if not previous.exists():
        return {"cells": [], "failed": {}}
    return json.loads(previous.read_text())


def kept_cells(previous: dict, keep: set[str]) -> list[Cell]:
    """The earlier run's cells of the tables in `keep`, their causes attached afresh from
    today's tables."""
    tables = {t.id: t for t in TABLES}
    cells = []
    for c in previous["cells"]:
        if owner(c["table"]) not in keep or owner(c["table"]) not in tables:
            continue
        # Causes are attached afresh below; ratio is derived.
        derived = ("ratio", "cause", "reversal_kind", "magnitude_kind")
        fields = {k: v for k, v in c.items() if k not in derived}
        cells.append(Cell(**fields))
    for table_id in keep:
        if table_id in tables:
            attach_causes([c for c in cells if owner(c.table) == table_id], tables[table_id])
    return cells


def run_tables(args, scratch: Path) -> tuple[list[Cell], dict[str, str], list[str]]:
    ctx = Context(loom=args.loom, scratch=scratch, quick=args.quick, backend=args.backend,
                  log=lambda m: print(m, file=sys.stderr, flush=True), sets=args.sets)
    cells, failures, problems = [], {}, []
    for i, table in enumerate(args.tables, 1):
        start = time.monotonic()
        print(f"reproduce: [{i}/{len(args.tables)}] {table.id}: {table.title}",
              file=sys.stderr, flush=True)
        try:
            got = table.run(ctx)
        except (LoomFailed, RuntimeError, KeyError, OSError, ValueError, SystemExit) as e:
            failures[table.id] = str(e)
            print(f"reproduce: {table.id} FAILED: {e}", file=sys.stderr)
            continue
        judge(got)
        attach_causes(got, table)
        problems += check_directions(got, table)
        cells += got
        print(f"reproduce: {table.id}: {len(got)} cells in {time.monotonic() - start:.0f} s",
              file=sys.stderr, flush=True)
    return cells, failures, problems


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    rerun = {t.id for t in args.tables}
    previous = previous_run(out)
    if run_kind(previous) != args.kind:
        previous = {"cells": [], "failed": {}}  # never mix sizes, backends or overrides
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    aside = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        with tempfile.TemporaryDirectory(prefix="loom-reproduce-") as scratch:
            cells, failures, problems = run_tables(args, Path(scratch))
        # Tables not rerun, and tables that failed now, keep their earlier cells.
        keep = ({t.id for t in TABLES} - rerun) | set(failures)
        cells = kept_cells(previous, keep) + cells
        failures = {**{k: v for k, v in previous.get("failed", {}).items() if k not in rerun},
                    **failures}
        order = {t.id: i for i, t in enumerate(TABLES)}
        cells.sort(key=lambda c: order.get(owner(c.table), len(order)))
        for table in TABLES:
            mine = [c for c in cells if owner(c.table) == table.id]
            if mine:
                plot_table(table, mine, stage / f"{table.id}.png")
        write_page(stage / "README.md", TABLES, cells, NOT_COMPARED, failures,
                   quick=args.quick, owner=owner, sets=args.sets)
        write_summary(stage / "summary.md", TABLES, cells, owner=owner)
        (stage / "reproduction.json").write_text(json.dumps(
            {"quick": args.quick, "backend": args.backend,
             **({"sets": args.sets} if args.sets else {}),
             "cells": [c.to_json() for c in cells],
             "failed": dict(sorted(failures.items()))}, indent=1) + "\n")
        # Swap in place: the earlier output is moved aside first, so an interrupt leaves
        # one of the two whole.
        if out.exists():
            os.replace(out, aside)
        os.replace(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)
    if args.update_readme:
        if failures:
            print("reproduce: not updating README.md: tables failed to run", file=sys.stderr)
        else:
            update_readme((out / "summary.md").read_text())
    if args.json:
        print(json.dumps([c.to_json() for c in cells], indent=1))
    else:
        print((out / "summary.md").read_text(), end="")
        print(f"reproduce: wrote {out}/README.md, reproduction.json", file=sys.stderr)
    if args.check:
        for p in problems:
            print(f"reproduce: check: {p}", file=sys.stderr)
    return 1 if failures or (args.check and problems) else 0


README_BLOCK = ("<!-- reproduction summary: docs/reproduction/summary.md, written by "
                "analysis/reproduce.py -->\n", "<!-- end reproduction summary -->\n")


def readme_block(text: str) -> tuple[int, int]:
    """Where the quoted summary sits in the README's text (between the two markers)."""
    start = text.index(README_BLOCK[0]) + len(README_BLOCK[0])
    return start, text.index(README_BLOCK[1], start)


def update_readme(summary: str) -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = readme_block(text)
    readme.write_text(text[:start] + summary + text[end:])


def owner(table_id: str) -> str:
    """The reproduced table a cell belongs to (Fig 4.12's claims run with Table 4.3)."""
    return {"diss-F4.12": "diss-T4.3"}.get(table_id, table_id)


def terminated(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through main's finally: staging removed


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, terminated)
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the staging folder is gone (main's finally)
        print("reproduce: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
