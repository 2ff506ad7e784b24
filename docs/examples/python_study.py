"""Loom from Python, notebook style (docs/python.md): the README's default study, then a
sweep and its plot. CI runs it (ctest -R python.docs_example).

    PYTHONPATH=build/python /usr/bin/python3 docs/examples/python_study.py [OUT_DIR]
"""
import sys

import matplotlib
matplotlib.use("Agg")  # files, no window: a notebook shows the figure inline instead
import pandas as pd

import loom

out = sys.argv[1] if len(sys.argv) > 1 else "."

# The README's default what-if study: loom sim configs/examples/vlm-frozen.toml
r = loom.sim("configs/examples/vlm-frozen.toml")
print(f"{r.scheduler}: iteration {r.iteration_time_s * 1e3:.2f} ms, "
      f"bubble {r.bubble_fraction:.1%}, MFU {r.mfu:.1%}")
print(r.timeline.groupby("kind")["end_s"].count())  # ops per kind, from the timeline

# How many microbatches does it need? Five schedulers, two depths, 4 to 32 microbatches.
rows = pd.DataFrame(loom.sweep("studies/vlm-microbatches.toml"))
rows = rows[rows["parallel.pp"] == 4]
ax = rows.pivot(index="schedule.microbatches", columns="scheduler",
                values="throughput_samples_per_s").plot(marker="o")
ax.set_ylabel("samples/s")
ax.figure.savefig(f"{out}/microbatches.png", dpi=120)
print(rows.groupby("scheduler")["throughput_samples_per_s"].max())
