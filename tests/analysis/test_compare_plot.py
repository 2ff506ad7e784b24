"""Tests of analysis/compare_plot.py (drawn by `loom compare`): a prediction above a
measurement on one time axis, written atomically and byte-reproducibly.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ANALYSIS_DIR = Path(__file__).resolve().parents[2] / "analysis"
if str(ANALYSIS_DIR) not in sys.path:
    sys.path.insert(0, str(ANALYSIS_DIR))

import compare_plot  # noqa: E402

PRED = """\
rank,kind,module,stage,microbatch,start_s,end_s
0,F,vision,0,0,0.000000000,0.010000000
0,send,vision,0,0,0.010000000,0.011000000
0,B,vision,0,0,0.031000000,0.051000000
1,recv,llm,1,0,0.000000000,0.011000000
1,F,llm,1,0,0.011000000,0.021000000
1,B,llm,1,0,0.021000000,0.031000000
"""
MEAS = PRED.replace("0.051000000", "0.060000000")


def make_run(root, name, timeline, iteration_s, backend):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "timeline.csv"), "w") as f:
        f.write(timeline)
    with open(os.path.join(d, "metrics.json"), "w") as f:
        json.dump({"iteration_time_s": iteration_s, "scheduler": "1f1b", "backend": backend}, f)
    return d


class ComparePlotTest(unittest.TestCase):
    def test_draws_both_timelines_reproducibly(self):
        with tempfile.TemporaryDirectory() as root:
            pred = make_run(root, "pred", PRED, 0.051, "evaluator")
            meas = make_run(root, "meas", MEAS, 0.060, "exec-host")
            pngs = []
            for name in ("a.png", "b.png"):
                out = os.path.join(root, name)
                self.assertEqual(compare_plot.main([pred, meas, "-o", out, "--quiet"]), 0)
                with open(out, "rb") as f:
                    pngs.append(f.read())
            self.assertTrue(pngs[0].startswith(b"\x89PNG"))
            self.assertEqual(pngs[0], pngs[1])
            self.assertEqual(sorted(os.listdir(root)), ["a.png", "b.png", "meas", "pred"])

    def test_malformed_timeline_is_exit_2_naming_the_file(self):
        with tempfile.TemporaryDirectory() as root:
            pred = make_run(root, "pred", "rank,kind\n0,F\n", 0.05, "evaluator")
            meas = make_run(root, "meas", MEAS, 0.06, "exec-host")
            r = subprocess.run([sys.executable, str(ANALYSIS_DIR / "compare_plot.py"), pred, meas,
                                "-o", os.path.join(root, "x.png")], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(ANALYSIS_DIR)})
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("timeline.csv", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(root, "x.png")))


if __name__ == "__main__":
    unittest.main()
