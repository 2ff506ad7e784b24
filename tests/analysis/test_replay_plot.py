"""Tests of analysis/replay_plot.py: replay loaders, window averages, breakdown shares, CLI.

Each test writes tiny replay directories by hand (two policies on a 1-hour trace with two
failures), so nothing here needs the loom binary. Run with:
    PYTHONPATH=analysis /usr/bin/python3 -m unittest discover -s tests/analysis
"""

import contextlib
import io
import json
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

ANALYSIS_DIR = Path(__file__).resolve().parents[2] / "analysis"
if str(ANALYSIS_DIR) not in sys.path:
    sys.path.insert(0, str(ANALYSIS_DIR))

import loom_plot as lp  # noqa: E402
import replay_plot as rp  # noqa: E402

# Oobleck-like: a short reconfiguration (zero throughput) after each failure.
OOBLECK_THROUGHPUT = """\
time_s,nodes,samples_per_s
0,30,38.4
600,29,0
603,29,37.1
1200,28,0
1206,28,35.9
3600,28,35.9
"""
# Varuna-like: longer restarts.
VARUNA_THROUGHPUT = """\
time_s,nodes,samples_per_s
0,30,38.0
600,29,0
680,29,33.0
1200,28,0
1300,28,33.0
3600,28,33.0
"""
OOBLECK_SUMMARY = {
    "policy": "oobleck", "trace": "traces/oobleck/10m.csv", "duration_s": 3600,
    "average_throughput_samples_per_s": 36.2, "samples_committed": 130000, "iterations": 160,
    "global_batch": 819,
    "time_s": {"training": 3500, "restart": 0, "checkpoint": 0, "reconfiguration": 9,
               "lost_work": 60, "idle": 31},
}
VARUNA_SUMMARY = dict(OOBLECK_SUMMARY, policy="varuna-like",
                      average_throughput_samples_per_s=30.1,
                      time_s={"training": 2800, "restart": 180, "checkpoint": 300,
                              "reconfiguration": 0, "lost_work": 250, "idle": 70})


def write_replay(directory, throughput, summary):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "throughput.csv").write_text(throughput)
    if summary is not None:
        (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    return directory


def run(argv):
    """replay_plot's main through lp.run_cli: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = lp.run_cli("replay_plot.py", rp.main, argv)
    return code, out.getvalue(), err.getvalue()


class ReplayPlotTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)
        self.oobleck = write_replay(self.tmp / "oobleck", OOBLECK_THROUGHPUT, OOBLECK_SUMMARY)
        self.varuna = write_replay(self.tmp / "varuna", VARUNA_THROUGHPUT, VARUNA_SUMMARY)

    def tearDown(self):
        self._tmp.cleanup()

    def test_loads_a_replay_directory(self):
        r = rp.load_replay(self.oobleck)
        self.assertEqual(r.policy, "oobleck")
        self.assertEqual(list(r.nodes), [30, 29, 29, 28, 28, 28])
        self.assertEqual(r.end_s, 3600.0)

    def test_window_averages_are_exact(self):
        # 38.4 for 600 s, 0 for 3 s, 37.1 after: the first 10-minute window is all 38.4,
        # the second mixes 3 s of nothing into 597 s of 37.1.
        r = rp.load_replay(self.oobleck)
        x, y = rp.window_average(r.time_s[:-1], r.samples_per_s[:-1], r.end_s, 600)
        self.assertEqual(list(x), [0, 600, 1200, 1800, 2400, 3000])
        self.assertAlmostEqual(y[0], 38.4)
        self.assertAlmostEqual(y[1], 37.1 * 597 / 600)
        self.assertAlmostEqual(y[2], 35.9 * 594 / 600)
        self.assertAlmostEqual(y[-1], 35.9)
        # Windows preserve the integral: samples trained are the same either way.
        total = np.sum(r.samples_per_s[:-1] * np.diff(r.time_s))
        self.assertAlmostEqual(float(np.sum(y * 600)), float(total), places=6)

    def test_breakdown_shares_sum_to_one(self):
        shares = rp.breakdown_fractions(VARUNA_SUMMARY)
        self.assertAlmostEqual(sum(shares.values()), 1.0)
        self.assertAlmostEqual(shares["restart"], 180 / 3600)
        zero = dict(VARUNA_SUMMARY, time_s={k: 0 for k, _, _ in rp.BREAKDOWN})
        self.assertEqual(set(rp.breakdown_fractions(zero).values()), {0.0})

    def test_cli_writes_both_figures_byte_identically(self):
        outputs = []
        for name in ("a", "b/nested"):  # -o creates a missing folder, parents included
            out = self.tmp / name
            code, stdout, err = run([str(self.oobleck), str(self.varuna), "-o", str(out),
                                     "--window", "5min"])
            self.assertEqual(code, 0, err)
            self.assertIn("replay_throughput.png", stdout)
            outputs.append([(out / f).read_bytes()
                            for f in ("replay_throughput.png", "replay_breakdown.png")])
        self.assertTrue(outputs[0][0].startswith(b"\x89PNG"))
        self.assertEqual(outputs[0], outputs[1])

    def test_alive_line_comes_from_the_most_detailed_replay(self):
        # A policy that never trains writes one row and the end: its node column is flat.
        idle = write_replay(self.tmp / "idle", "time_s,nodes,samples_per_s\n0,30,0\n3600,28,0\n",
                            dict(OOBLECK_SUMMARY, policy="bamboo-like"))
        replays = [rp.load_replay(d) for d in (idle, self.oobleck)]
        source, same = rp.alive_source(replays)
        self.assertTrue(same)
        self.assertEqual(source.policy, "oobleck")
        other = write_replay(self.tmp / "other", OOBLECK_THROUGHPUT,
                             dict(OOBLECK_SUMMARY, trace="traces/spot/ec2-p3.csv"))
        source, same = rp.alive_source([replays[0], rp.load_replay(other)])
        self.assertFalse(same)
        self.assertEqual(source.policy, "bamboo-like")  # different traces: the first one

    def test_the_alive_line_ends_where_a_policy_stopped(self):
        # Bamboo-like out of memory at 600 s holds one row: its line ends there, not at 1 h.
        stopped = write_replay(self.tmp / "oom", "time_s,nodes,samples_per_s\n0,30,0\n3600,28,0\n",
                               dict(OOBLECK_SUMMARY, policy="bamboo-like",
                                    stopped={"time_s": 600, "reason": "out of memory"}))
        x, y, reason = rp.alive_steps(rp.load_replay(stopped))
        self.assertEqual(list(x), [0.0, 600 / 3600])
        self.assertEqual(list(y), [30, 30])
        self.assertEqual(reason, "out of memory")
        x, _, reason = rp.alive_steps(rp.load_replay(self.oobleck))
        self.assertEqual((x[-1], reason), (1.0, None))  # a policy that ran to the end
        code, _, err = run([str(stopped), "-o", str(self.tmp / "p")])
        self.assertEqual(code, 0, err)

    def test_throughput_alone_needs_no_summary(self):
        bare = write_replay(self.tmp / "bare", OOBLECK_THROUGHPUT, None)
        code, _, err = run([str(bare), "-o", str(self.tmp), "--only", "throughput"])
        self.assertEqual(code, 0, err)
        code, _, err = run([str(bare), "-o", str(self.tmp), "--only", "breakdown"])
        self.assertEqual(code, 2)
        self.assertIn("summary.json", err)

    def assertBadInput(self, argv, *fragments):
        code, _, err = run(argv)
        self.assertEqual(code, 2, err)
        for fragment in fragments:
            self.assertIn(fragment, err)

    def test_bad_number_names_file_and_line(self):
        bad = OOBLECK_THROUGHPUT.replace("603,29,37.1", "603,29,fast")
        d = write_replay(self.tmp / "bad", bad, OOBLECK_SUMMARY)
        self.assertBadInput([str(d), "-o", str(self.tmp)], "throughput.csv:4", "samples_per_s",
                            "fast")

    def test_time_going_back_names_the_line(self):
        bad = OOBLECK_THROUGHPUT.replace("1200,28,0", "500,28,0")
        d = write_replay(self.tmp / "bad", bad, OOBLECK_SUMMARY)
        self.assertBadInput([str(d), "-o", str(self.tmp)], "throughput.csv:5", "backwards")

    def test_bad_header_and_summary(self):
        d = write_replay(self.tmp / "hdr", OOBLECK_THROUGHPUT.replace("nodes", "alive"), None)
        self.assertBadInput([str(d), "-o", str(self.tmp)], "throughput.csv:1", "nodes")
        summary = json.loads(json.dumps(OOBLECK_SUMMARY))
        del summary["time_s"]["idle"]
        d = write_replay(self.tmp / "sum", OOBLECK_THROUGHPUT, summary)
        self.assertBadInput([str(d), "-o", str(self.tmp)], "summary.json", "time_s.idle")
        summary = dict(OOBLECK_SUMMARY, duration_s="long")
        d = write_replay(self.tmp / "sum2", OOBLECK_THROUGHPUT, summary)
        self.assertBadInput([str(d), "-o", str(self.tmp)], "summary.json:", "duration_s")
        (d / "summary.json").write_text('{"policy": "x",\n "duration_s": }')
        self.assertBadInput([str(d), "-o", str(self.tmp)], "summary.json:2", "invalid JSON")

    def test_bad_window_and_missing_directory(self):
        self.assertBadInput([str(self.oobleck), "--window", "soon"], "--window")
        self.assertBadInput([str(self.tmp / "absent")], "not a directory")
        (self.tmp / "a-file").write_text("x")
        self.assertBadInput([str(self.oobleck), "-o", str(self.tmp / "a-file")],
                            "exists and is not a directory")


    def test_events_become_restart_and_reconfiguration_markers(self):
        (self.varuna / "events.csv").write_text(
            "time_s,event,nodes_alive,action,cost_s,detail\n"
            "0,start,30,plan,0,grid\n"
            "540,checkpoint,30,checkpoint,11.2,every 10 iterations\n"
            "600,remove,29,restart,78.7,grid\n"
            "610,add,30,wait,0,node31; usable from 655 s\n"
            "1200,remove,28,reinstantiate,3,simple\n")
        replay = rp.load_replay(self.varuna)
        self.assertEqual(replay.markers, {"restart": [600.0], "reconfiguration": [1200.0]})
        self.assertEqual(rp.load_replay(self.oobleck).markers,
                         {"restart": [], "reconfiguration": []})  # no events.csv
        code, out, _ = run([str(self.oobleck), str(self.varuna), "-o", str(self.tmp), "--quiet"])
        self.assertEqual(code, 0)
        self.assertEqual(out, "")
        self.assertTrue((self.tmp / "replay_throughput.png").exists())


if __name__ == "__main__":
    unittest.main()
