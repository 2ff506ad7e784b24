"""Tests of analysis/: loaders, rank subsetting, the Gantt and memory plots, plot_all.py.

Each test builds a tiny run directory by hand (a 2-rank 1F1B iteration), so the tests
need neither the loom binary nor a real simulation. Run with:
    PYTHONPATH=analysis /usr/bin/python3 -m unittest discover -s tests/analysis
"""

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ANALYSIS_DIR = Path(__file__).resolve().parents[2] / "analysis"
if str(ANALYSIS_DIR) not in sys.path:  # also runnable without PYTHONPATH
    sys.path.insert(0, str(ANALYSIS_DIR))

import gantt  # noqa: E402
import loom_plot as lp  # noqa: E402
import memory_plot  # noqa: E402
import plot_all  # noqa: E402

# Two stages, two microbatches of 1F1B: F 10 ms, B 20 ms, 1 ms transfers, then the
# gradient all-reduce (no microbatch, so an empty field).
TIMELINE = """\
rank,kind,module,stage,microbatch,start_s,end_s
0,F,vision,0,0,0.000000000,0.010000000
0,send,vision,0,0,0.010000000,0.011000000
0,F,vision,0,1,0.010000000,0.020000000
0,send,vision,0,1,0.020000000,0.021000000
0,recv,vision,0,0,0.020000000,0.042000000
0,B,vision,0,0,0.042000000,0.062000000
0,recv,vision,0,1,0.062000000,0.073000000
0,B,vision,0,1,0.073000000,0.093000000
0,allreduce,vision,0,,0.093000000,0.100000000
1,recv,llm,1,0,0.000000000,0.011000000
1,F,llm,1,0,0.011000000,0.021000000
1,B,llm,1,0,0.021000000,0.041000000
1,send,llm,1,0,0.041000000,0.042000000
1,recv,llm,1,1,0.041000000,0.041000000
1,F,llm,1,1,0.041000000,0.051000000
1,B,llm,1,1,0.051000000,0.071000000
1,send,llm,1,1,0.071000000,0.072000000
1,allreduce,llm,1,,0.093000000,0.100000000
"""

MEMORY = """\
rank,time_s,parameters_bytes,gradients_bytes,optimizer_bytes,activations_bytes,total_bytes
0,0.000000000,1000,100,200,0,1300
0,0.010000000,1000,100,200,500,1800
0,0.020000000,1000,100,200,1000,2300
0,0.062000000,1000,100,200,500,1800
0,0.093000000,1000,100,200,0,1300
1,0.000000000,2000,0,0,0,2000
1,0.021000000,2000,0,0,700,2700
1,0.041000000,2000,0,0,0,2000
1,0.051000000,2000,0,0,700,2700
1,0.071000000,2000,0,0,0,2000
"""

METRICS = {
    "iteration_time_s": 0.1, "throughput_samples_per_s": 40.0, "bubble_fraction": 0.35,
    "scheduler": "1f1b", "backend": "evaluator", "microbatches": 2,
    "layout": {"pp": 2, "dp": 1, "tp": 1},
    "per_rank": [{"rank": 0, "busy_s": 0.06, "peak_memory_bytes": 2300,
                  "peak_live_microbatches": 2},
                 {"rank": 1, "busy_s": 0.06, "peak_memory_bytes": 2700,
                  "peak_live_microbatches": 1}],
}

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_run(directory, timeline=TIMELINE, memory=MEMORY, metrics=METRICS):
    """A run directory as `loom sim` leaves it before plotting."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "timeline.csv").write_text(timeline)
    (directory / "memory.csv").write_text(memory)
    if metrics is not None:
        (directory / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return directory


def replace_line(text, line_number, new_line):
    """The text with its 1-based line `line_number` replaced."""
    lines = text.splitlines()
    lines[line_number - 1] = new_line
    return "\n".join(lines) + "\n"


def many_ranks_timeline(ranks):
    """One F and one B per rank, staggered like a pipeline fill."""
    rows = ["rank,kind,module,stage,microbatch,start_s,end_s"]
    for r in range(ranks):
        rows.append(f"{r},F,llm,{r},0,{r * 0.001:.9f},{r * 0.001 + 0.01:.9f}")
        rows.append(f"{r},B,llm,{r},0,{r * 0.001 + 0.01:.9f},{r * 0.001 + 0.03:.9f}")
    return "\n".join(rows) + "\n"


def png_size(data):
    """(width, height) from a PNG's IHDR chunk, after checking the signature and IEND."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR" or not data.endswith(
            b"IEND\xaeB`\x82"):
        raise AssertionError("not a complete PNG")
    return struct.unpack(">II", data[16:24])


def run_cli(main, argv):
    """Runs a script's main through lp.run_cli: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = lp.run_cli("plot_all.py", main, argv)
    return code, out.getvalue(), err.getvalue()


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()


class LoaderTest(TempDirTest):
    def test_timeline_columns(self):
        t = lp.load_timeline(write_run(self.tmp) / "timeline.csv")
        self.assertEqual(len(t), 18)
        self.assertEqual(t.ranks(), [0, 1])
        self.assertEqual(list(t.kind[:3]), ["F", "send", "F"])
        self.assertEqual(t.module_names, ["vision", "llm"])
        self.assertEqual(int(t.microbatch[8]), -1)  # the all-reduce has no microbatch
        self.assertEqual(int(t.microbatch[2]), 1)
        self.assertAlmostEqual(t.end_time_s(), 0.1)

    def test_memory_is_a_step_function(self):
        m = lp.load_memory(write_run(self.tmp) / "memory.csv")
        self.assertEqual(m.peak_by_rank(), {0: 2300.0, 1: 2700.0})
        self.assertEqual(m.peak_by_rank("activations_bytes"), {0: 1000.0, 1: 700.0})
        self.assertEqual(m.value_at(0, 0.015), 1800.0)  # holds from 0.010 until 0.020
        self.assertEqual(m.value_at(0, 0.020), 2300.0)  # a row applies from its own time
        self.assertEqual(m.value_at(0, 5.0), 1300.0)    # the last row holds to the end
        times, values = m.series(1)
        self.assertEqual(list(times), [0.0, 0.021, 0.041, 0.051, 0.071])
        self.assertEqual(list(values), [2000, 2700, 2000, 2700, 2000])

    def test_metrics(self):
        metrics = lp.load_metrics(write_run(self.tmp) / "metrics.json")
        self.assertEqual(metrics["scheduler"], "1f1b")
        self.assertIsNone(lp.load_metrics(self.tmp / "absent.json", required=False))

    def assertInputError(self, load, path, line, *fragments):
        """load(path) must raise LoomInputError at `line` mentioning all fragments."""
        with self.assertRaises(lp.LoomInputError) as caught:
            load(path)
        e = caught.exception
        self.assertEqual(e.line, line, str(e))
        for fragment in (os.path.basename(path),) + fragments:
            self.assertIn(fragment, str(e))
        return e

    def test_missing_file(self):
        self.assertInputError(lp.load_timeline, str(self.tmp / "timeline.csv"), None,
                              "not found")

    def test_bad_number_names_line_and_column(self):
        bad = replace_line(TIMELINE, 3, "0,send,vision,0,0,0.01x,0.011")
        run = write_run(self.tmp, timeline=bad)
        e = self.assertInputError(lp.load_timeline, str(run / "timeline.csv"), 3, "0.01x")
        self.assertEqual(e.column, "start_s")

    def test_bad_integer(self):
        bad = replace_line(TIMELINE, 5, "0,send,vision,0,1.5,0.020,0.021")
        run = write_run(self.tmp, timeline=bad)
        e = self.assertInputError(lp.load_timeline, str(run / "timeline.csv"), 5, "1.5")
        self.assertEqual(e.column, "microbatch")

    def test_missing_and_extra_columns(self):
        missing = "\n".join(",".join(line.split(",")[:-1]) for line in TIMELINE.splitlines())
        run = write_run(self.tmp, timeline=missing + "\n")
        self.assertInputError(lp.load_timeline, str(run / "timeline.csv"), 1,
                              "missing column", "end_s")
        extra = MEMORY.replace("total_bytes\n", "total_bytes,gpu\n", 1)
        run = write_run(self.tmp, memory=extra)
        self.assertInputError(lp.load_memory, str(run / "memory.csv"), 1,
                              "unexpected column", "gpu")

    def test_wrong_field_count_and_blank_line(self):
        run = write_run(self.tmp, timeline=replace_line(TIMELINE, 4, "0,F,vision,0,1,0.01"))
        self.assertInputError(lp.load_timeline, str(run / "timeline.csv"), 4, "6 fields")
        run = write_run(self.tmp, timeline=replace_line(TIMELINE, 6, ""))
        self.assertInputError(lp.load_timeline, str(run / "timeline.csv"), 6, "empty line")

    def test_end_before_start(self):
        run = write_run(self.tmp, timeline=replace_line(TIMELINE, 7, "0,B,vision,0,0,0.06,0.05"))
        e = self.assertInputError(lp.load_timeline, str(run / "timeline.csv"), 7, "before")
        self.assertEqual(e.column, "end_s")

    def test_non_finite_and_negative(self):
        run = write_run(self.tmp, memory=replace_line(MEMORY, 3, "0,0.01,nan,100,200,500,1800"))
        self.assertInputError(lp.load_memory, str(run / "memory.csv"), 3, "finite")
        run = write_run(self.tmp, memory=replace_line(MEMORY, 2, "-1,0,1000,100,200,0,1300"))
        self.assertInputError(lp.load_memory, str(run / "memory.csv"), 2, ">= 0")

    def test_memory_time_must_not_go_backwards(self):
        run = write_run(self.tmp, memory=replace_line(MEMORY, 4, "0,0.005,1000,100,200,0,1300"))
        self.assertInputError(lp.load_memory, str(run / "memory.csv"), 4, "backwards")

    def test_bad_metrics(self):
        run = write_run(self.tmp, metrics=None)
        (run / "metrics.json").write_text('{\n  "scheduler": "1f1b",\n  oops\n}\n')
        self.assertInputError(lp.load_metrics, str(run / "metrics.json"), 3, "invalid JSON")
        (run / "metrics.json").write_text('{"bubble_fraction": "high"}')
        self.assertInputError(lp.load_metrics, str(run / "metrics.json"), None, "bubble_fraction")


class RankSubsetTest(unittest.TestCase):
    def test_evenly_spaced_with_first_and_last(self):
        for n, cap in ((100, 32), (33, 32), (1024, 32), (5, 2), (64, 7)):
            picked = lp.select_ranks(range(n), cap)
            self.assertEqual(len(picked), cap, (n, cap))
            self.assertEqual((picked[0], picked[-1]), (0, n - 1))
            self.assertEqual(picked, sorted(set(picked)))
            gaps = [b - a for a, b in zip(picked, picked[1:])]
            self.assertLessEqual(max(gaps) - min(gaps), 1, (n, cap, gaps))

    def test_few_ranks_are_all_kept(self):
        self.assertEqual(lp.select_ranks([3, 1, 2]), [1, 2, 3])
        self.assertEqual(lp.select_ranks(range(32)), list(range(32)))

    def test_sparse_rank_numbers(self):
        ranks = list(range(0, 400, 4))
        picked = lp.select_ranks(ranks, 10)
        self.assertEqual((picked[0], picked[-1], len(picked)), (0, 396, 10))
        self.assertTrue(set(picked) <= set(ranks))

    def test_parse_rank_list(self):
        self.assertEqual(lp.parse_rank_list("5,0-2,1", range(8)), [0, 1, 2, 5])
        with self.assertRaises(lp.LoomInputError) as caught:
            lp.parse_rank_list("0,9", range(8))
        self.assertIn("9", str(caught.exception))
        with self.assertRaises(lp.LoomInputError):
            lp.parse_rank_list("zero", range(8))


class RenderTest(TempDirTest):
    def setUp(self):
        super().setUp()
        run = write_run(self.tmp)
        self.timeline = lp.load_timeline(run / "timeline.csv")
        self.memory = lp.load_memory(run / "memory.csv")

    def test_gantt_title_and_labels(self):
        fig = gantt.render_gantt(self.timeline, METRICS)
        ax = fig.axes[0]
        self.assertIn("1f1b on evaluator", ax.get_title())
        self.assertIn("bubble 35.0%", ax.get_title())
        self.assertIn("iteration 100.000 ms", ax.get_title())
        self.assertEqual([t.get_text() for t in ax.get_yticklabels()], ["rank 0", "rank 1"])
        labels = sorted(t.get_text() for t in ax.texts)  # microbatch numbers in boxes
        self.assertEqual(labels, ["0", "0", "0", "0", "1", "1", "1", "1"])
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertIn("allreduce", legend)
        self.assertIn("module llm", legend)

    def test_gantt_without_comm(self):
        fig = gantt.render_gantt(self.timeline, None, show_comm=False)
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        self.assertFalse({"send", "recv", "allreduce"} & set(legend))
        self.assertTrue(fig.axes[0].get_title().startswith("Pipeline schedule\n"))

    def test_gantt_subsets_many_ranks(self):
        path = self.tmp / "wide.csv"
        path.write_text(many_ranks_timeline(40))
        fig = gantt.render_gantt(lp.load_timeline(path))
        ax = fig.axes[0]
        self.assertIn("showing 32 of 40 ranks", ax.get_title())
        ticks = [t.get_text() for t in ax.get_yticklabels()]
        self.assertEqual((ticks[0], ticks[-1]), ("rank 0", "rank 39"))

    def test_gantt_window_clips_and_shifts(self):
        # 30-60 ms: rank 0's recv (20-42) clipped to 30-42, its B of mb 0 (42-62) to 42-60.
        win = gantt.windowed(self.timeline, 30, 60)
        rows = sorted(zip(win.rank.tolist(), win.kind.tolist(), (win.start_s * 1e3).round(6).tolist(),
                          (win.end_s * 1e3).round(6).tolist()))
        self.assertIn((0, "recv", 0.0, 12.0), rows)
        self.assertIn((0, "B", 12.0, 30.0), rows)
        self.assertTrue(all(0 <= a <= b <= 30 for _, _, a, b in rows))
        self.assertFalse(any(k == "allreduce" for _, k, _, _ in rows))  # 93-100 ms is outside
        fig = gantt.render_gantt(self.timeline, METRICS, window_ms=(30, 60))
        ax = fig.axes[0]
        self.assertEqual(ax.get_xlabel(), "time (ms after 30 ms)")
        self.assertLess(ax.get_xlim()[1], 31)

    def test_gantt_aggregates_many_boxes(self):
        fig = gantt.render_gantt(self.timeline, METRICS, max_boxes=5)
        ax = fig.axes[0]
        self.assertIn("18 boxes aggregated per pixel", ax.get_title())
        self.assertEqual(len(ax.images), 1)
        self.assertEqual(len(ax.collections), 0)

    def test_lane_occupancy_is_exact(self):
        import numpy as np
        occ = gantt.lane_occupancy(np.array([0, 0, 1]), np.array([0.5, 3.0, 1.0]),
                                   np.array([2.25, 3.5, 4.0]), lanes=2, width_px=4)
        np.testing.assert_allclose(occ, [[0.5, 1.0, 0.25, 0.5], [0.0, 1.0, 1.0, 1.0]])

    def test_memory_plot(self):
        # One line per rank, and the peak rank (1) split by kind: only the kinds it has.
        # A capacity far above the data is named, not drawn (it would flatten the lines).
        fig = memory_plot.render_memory(self.memory, METRICS, capacity_gib=1.0)
        ax = fig.axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertEqual(legend, ["rank 0", "rank 1", "rank 1: parameters", "rank 1: activations"])
        texts = [t.get_text() for t in ax.texts]
        self.assertIn("peak 0.00 GiB (rank 1)", texts)
        self.assertIn("GPU capacity 1.0 GiB (off the scale)", texts)
        # A capacity near the peak is a dashed line in the legend.
        near = 2700 * 1.2 / memory_plot.GIB
        fig = memory_plot.render_memory(self.memory, METRICS, capacity_gib=near)
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        self.assertIn(f"capacity {near:.1f} GiB", legend)

    def test_memory_plot_draws_identical_ranks_once(self):
        # Rank 2 repeats rank 0 (a data-parallel replica): one line for both.
        extra = MEMORY + "".join(line.replace("0,", "2,", 1) + "\n"
                                 for line in MEMORY.splitlines()[1:6])
        memory = lp.load_memory(write_run(self.tmp / "dp", memory=extra) / "memory.csv")
        self.assertEqual(memory_plot.distinct_ranks(memory, memory.ranks()), [[0, 2], [1]])
        fig = memory_plot.render_memory(memory, METRICS)
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        self.assertEqual(legend[:2], ["ranks 0, 2 (2 identical)", "rank 1"])

    def test_memory_plot_one_rank_stacked(self):
        fig = memory_plot.render_memory(self.memory, METRICS, rank=0)
        ax = fig.axes[0]
        self.assertIn("rank 0", ax.get_title())
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertEqual(legend[:4], ["parameters", "gradients", "optimizer", "activations"])


class PlotAllTest(TempDirTest):
    def run_script(self, *args):
        return subprocess.run([sys.executable, str(ANALYSIS_DIR / "plot_all.py"), *args],
                              capture_output=True, text=True, timeout=60)

    def test_writes_valid_identical_pngs(self):
        run = write_run(self.tmp / "run")
        result = self.run_script(str(run))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines(),
                         [f"wrote {run / 'gantt.png'}", f"wrote {run / 'memory.png'}"])
        first = {}
        for name in ("gantt.png", "memory.png"):
            first[name] = (run / name).read_bytes()
            width, height = png_size(first[name])
            self.assertGreater(width, 100)
            self.assertGreater(height, 100)
        # A second run (in this process this time) gives the same bytes.
        code, out, err = run_cli(plot_all.main, [str(run), "--quiet"])
        self.assertEqual((code, out, err), (0, "", ""))
        for name in first:
            self.assertEqual((run / name).read_bytes(), first[name], name)
        self.assertEqual(sorted(os.listdir(run)), ["gantt.png", "memory.csv", "memory.png",
                                                   "metrics.json", "timeline.csv"])

    def test_bad_number_exits_2_naming_file_and_line(self):
        bad = replace_line(TIMELINE, 3, "0,send,vision,0,0,abc,0.011")
        run = write_run(self.tmp / "run", timeline=bad)
        result = self.run_script(str(run), "--quiet")
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr.splitlines(),
                         [f"plot_all.py: error: {run / 'timeline.csv'}:3: column 'start_s': "
                          "expected a number, got 'abc'"])
        self.assertEqual(sorted(os.listdir(run)), ["memory.csv", "metrics.json", "timeline.csv"])

    def test_missing_column_exits_2_and_writes_nothing(self):
        no_total = "\n".join(line.rsplit(",", 1)[0] for line in MEMORY.splitlines()) + "\n"
        run = write_run(self.tmp / "run", memory=no_total)
        code, out, err = run_cli(plot_all.main, [str(run)])
        self.assertEqual(code, 2)
        self.assertIn("memory.csv:1: missing column(s) total_bytes", err)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertFalse(list(run.glob("*.png")) + list(run.glob(".*")))

    def test_missing_metrics_is_fine(self):
        run = write_run(self.tmp / "run", metrics=None)
        code, _, err = run_cli(plot_all.main, [str(run), "--quiet"])
        self.assertEqual(code, 0, err)
        self.assertTrue((run / "gantt.png").exists())

    def test_missing_directory_exits_2(self):
        code, _, err = run_cli(plot_all.main, [str(self.tmp / "nope")])
        self.assertEqual(code, 2)
        self.assertIn("nope: not a directory", err)

    def test_unexpected_error_exits_1(self):
        def broken(argv):
            raise RuntimeError("boom")
        code, _, err = run_cli(broken, [])
        self.assertEqual(code, 1)
        self.assertIn("internal error: RuntimeError: boom", err)

    def test_failed_save_leaves_no_partial_png(self):
        target = self.tmp / "gantt.png"
        target.write_bytes(b"previous")

        class FailingFigure:
            def savefig(self, f, **kwargs):
                f.write(PNG_SIGNATURE + b"half an image")
                raise OSError("disk full")

        with self.assertRaises(OSError):
            lp.save_png(FailingFigure(), target)
        self.assertEqual(target.read_bytes(), b"previous")  # untouched, not truncated
        self.assertEqual(os.listdir(self.tmp), ["gantt.png"])  # no temporary left over


class CommandLineTest(TempDirTest):
    def test_gantt_and_memory_options(self):
        run = write_run(self.tmp / "run")
        out = self.tmp / "g.png"
        code, _, err = run_cli(gantt.main, [str(run), "-o", str(out), "--ranks", "1",
                                            "--no-comm"])
        self.assertEqual(code, 0, err)
        png_size(out.read_bytes())
        code, _, err = run_cli(memory_plot.main, [str(run), "-o", str(self.tmp / "m.png"),
                                                  "--rank", "1", "--capacity-gib", "0.5"])
        self.assertEqual(code, 0, err)
        png_size((self.tmp / "m.png").read_bytes())

    def test_unknown_rank_exits_2(self):
        run = write_run(self.tmp / "run")
        code, _, err = run_cli(gantt.main, [str(run), "--ranks", "0,7"])
        self.assertEqual(code, 2)
        self.assertIn("--ranks: no such rank(s) in the run: 7", err)
        self.assertFalse((run / "gantt.png").exists())


if __name__ == "__main__":
    unittest.main()
