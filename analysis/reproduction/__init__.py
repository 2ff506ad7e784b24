"""Seed-paper tables beside Loom's numbers, cell by cell (driven by analysis/reproduce.py).

Each module here reproduces one table or figure: it exposes TABLE, a `Table` whose
`run(ctx)` returns `Cell`s. cells.py holds the shared record, the claim and magnitude
rules and the helpers that run `loom`.
"""
