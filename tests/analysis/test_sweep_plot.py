"""Tests of analysis/sweep_plot.py: row selection, averaging, the plot kinds, bad input.

The CSV is written by hand in the columns `loom sweep` writes, so nothing here needs the
loom binary. Run with:
    PYTHONPATH=analysis /usr/bin/python3 -m unittest discover -s tests/analysis
"""

import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

ANALYSIS_DIR = Path(__file__).resolve().parents[2] / "analysis"
if str(ANALYSIS_DIR) not in sys.path:
    sys.path.insert(0, str(ANALYSIS_DIR))

import schedulers_gantt as sg  # noqa: E402
import sweep_plot as sp  # noqa: E402

RESULTS = """\
point,config,parallel.pp,schedule.microbatches,scheduler,config_hash,status,iteration_time_s,throughput_samples_per_s,bubble_fraction,peak_memory_max_bytes,peak_memory_mean_bytes,reason
0,a.toml,2,4,1f1b,h0,ok,2.0,4,0.3,1,1,
1,a.toml,2,4,gpipe,h1,ok,3.0,3,0.4,1,1,
2,a.toml,2,8,1f1b,h2,ok,1.0,8,0.2,1,1,
3,a.toml,2,8,gpipe,h3,infeasible,,,,,,"does not fit, 48 GB"
4,a.toml,4,4,1f1b,h4,ok,4.0,2,0.5,1,1,
5,a.toml,4,4,gpipe,h5,ok,5.0,1,0.6,1,1,
6,a.toml,4,8,1f1b,h6,ok,3.0,3,0.4,1,1,
7,a.toml,4,8,gpipe,h7,failed,,,,,,"no encoder"
"""


class SweepPlotTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.csv = Path(self.dir.name) / "results.csv"
        self.csv.write_text(RESULTS)

    def tearDown(self):
        self.dir.cleanup()

    def args(self, *extra):
        return sp.build_parser().parse_args([str(self.csv), *extra])

    def test_only_ok_rows_are_kept_and_where_slices(self):
        a = self.args("--x", "schedule.microbatches", "--hue", "scheduler", "--where",
                      "parallel.pp=2")
        rows = sp.load(a.csv, a)
        self.assertEqual([r["point"] for r in rows], ["0", "1", "2"])

    def test_rows_differing_elsewhere_are_averaged(self):
        a = self.args("--x", "schedule.microbatches", "--hue", "scheduler")
        means, averaged = sp.aggregate(sp.load(a.csv, a), a)
        self.assertEqual(means[("4", "1f1b")], 3.0)  # pp 2 and 4: (2 + 4) / 2
        self.assertNotIn(("8", "gpipe"), means)  # neither of its rows is ok
        self.assertEqual(averaged, 2)

    def test_a_hue_of_several_columns_labels_each_combination(self):
        a = self.args("--x", "schedule.microbatches", "--hue", "parallel.pp+scheduler")
        means, averaged = sp.aggregate(sp.load(a.csv, a), a)
        self.assertEqual(means[("4", "pp=2 scheduler=1f1b")], 2.0)
        self.assertEqual(means[("8", "pp=4 scheduler=1f1b")], 3.0)
        self.assertEqual(averaged, 1)

    def test_every_kind_writes_a_png(self):
        for kind, x in (("auto", "schedule.microbatches"), ("auto", "scheduler"),
                        ("heatmap", "schedule.microbatches")):
            out = Path(self.dir.name) / f"{kind}-{x}.png"
            hue = ["--hue", "parallel.pp"] if x != "scheduler" else []
            self.assertEqual(sp.main([str(self.csv), "--x", x, "--kind", kind, "--out", str(out),
                                      *hue]), 0)
            self.assertGreater(out.stat().st_size, 1000, out)
            self.assertFalse(Path(str(out) + ".tmp.png").exists())

    def test_doubling_counts_get_a_log_axis(self):
        self.assertTrue(sp.log_axis([8, 16, 32, 64, 128]))
        self.assertFalse(sp.log_axis([4, 8]))      # a narrow range stays linear
        self.assertFalse(sp.log_axis([0, 8, 64]))  # zero has no place on a log axis

    def test_an_unknown_column_exits_2_naming_it(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
            sp.main([str(self.csv), "--x", "parallel.ppp"])
        self.assertEqual(e.exception.code, 2)
        self.assertIn("results.csv:1: no column 'parallel.ppp'", err.getvalue())


class SchedulersGanttTest(unittest.TestCase):
    def test_one_row_per_scheduler_that_ran(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "timelines").mkdir()
            (d / "schedulers.csv").write_text(
                "scheduler,status,iteration_time_s,throughput_samples_per_s,bubble_fraction,"
                "peak_memory_max_bytes,peak_memory_mean_bytes,reason\n"
                "gpipe,ok,0.004,1,0,1,1,\n1f1b,ok,0.003,1,0,1,1,\ncornstarch,failed,,,,,,no\n"
                "interleaved-1f1b:chunks=2,ok,0.0035,1,0,1,1,\n")
            for name, end in (("gpipe", 0.004), ("1f1b", 0.003),
                              ("interleaved-1f1b_chunks-2", 0.0035)):
                (d / "timelines" / f"{name}.csv").write_text(
                    "rank,kind,module,stage,microbatch,start_s,end_s\n"
                    f"0,F,llm,0,0,0,0.001\n1,F,llm,1,0,0.001,0.002\n1,B,llm,1,0,0.002,{end}\n")
            self.assertEqual([s for s, _ in sg.ok_schedulers(str(d / "schedulers.csv"))],
                             ["1f1b", "interleaved-1f1b:chunks=2", "gpipe"])  # fastest first,
            # failed ones left out; an entry with options reads its file-safe timeline name
            self.assertEqual(sg.main([str(d)]), 0)
            self.assertGreater((d / "schedulers_gantt.png").stat().st_size, 1000)


if __name__ == "__main__":
    unittest.main()
