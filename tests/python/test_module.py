"""The Python module `loom` (issue 52): the CLI's numbers bit for bit, configs as dicts,
sweeps row by row, errors as exceptions naming the key, Ctrl-C and the GIL.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=<build>/python, LOOM=<loom
binary>, LOOM_SOURCE=<repository>."""

import json
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import unittest

import loom
from loom_cli import SOURCE, UNIFORM, VLM, cli


class MatchesTheCli(unittest.TestCase):
    def check_run(self, config, *cli_args, **sim_args):
        """loom.sim against `loom sim` on the same input: every file's content, and the
        schedule against `loom schedule export --format loom` (these configs have one
        replica, so folding leaves the schedule whole)."""
        with tempfile.TemporaryDirectory() as out:
            cli("sim", config, "--out", f"{out}/r", "--no-plot", "-q", *cli_args)
            sets = [a for a in cli_args if a.startswith("--set") or "=" in a]
            cli("schedule", "export", config, *sets, "--format", "loom", "--out", f"{out}/s.txt")
            r = loom.sim(config, **sim_args)
            files = pathlib.Path(out) / "r"
            self.assertEqual(r.metrics, json.loads((files / "metrics.json").read_text()))
            self.assertEqual(r.timeline_csv(), (files / "timeline.csv").read_text())
            self.assertEqual(r.memory_csv(), (files / "memory.csv").read_text())
            self.assertEqual(r.schedule, (pathlib.Path(out) / "s.txt").read_text())
        return r

    def test_simgrid_run_equals_the_cli_bit_for_bit(self):
        r = self.check_run(UNIFORM)
        self.assertEqual(r.backend, "simgrid")
        self.assertGreater(r.iteration_time_s, 0)

    def test_evaluator_run_with_overrides_equals_the_cli(self):
        r = self.check_run(VLM, "--set", "parallel.pp=2", "--set", "schedule.microbatches=8",
                           set={"parallel.pp": 2, "schedule.microbatches": 8})
        self.assertEqual(r.backend, loom.load_config(VLM)["sim"]["backend"])
        timeline = r.timeline
        self.assertEqual(list(timeline.columns),
                         ["rank", "kind", "module", "stage", "microbatch", "start_s", "end_s"])
        self.assertAlmostEqual(timeline["end_s"].max(), r.iteration_time_s, places=9)
        self.assertIn("total_bytes", r.memory.columns)

    def test_backend_and_fold_arguments_are_the_cli_flags(self):
        self.check_run(UNIFORM, "--backend", "evaluator", "--no-fold", backend="evaluator",
                       fold=False)

    def test_the_closed_form(self):
        # configs/examples/uniform-1f1b.toml: (m + p - 1)(F + B) = 11 x 3 ms.
        r = loom.sim(UNIFORM, backend="evaluator")
        self.assertAlmostEqual(r.iteration_time_s, 0.033, places=9)


class Configs(unittest.TestCase):
    def test_load_config_is_the_resolved_dump(self):
        dump = tomllib.loads(cli("config", VLM, "--set", "parallel.pp=2"))
        self.assertEqual(loom.load_config(VLM, set={"parallel.pp": 2}), dump)

    def test_a_dict_config_runs_as_its_file(self):
        config = loom.load_config(VLM)
        self.assertEqual(loom.sim(config).metrics["iteration_time_s"],
                         loom.sim(VLM).metrics["iteration_time_s"])
        config["parallel"]["pp"] = 2
        self.assertEqual(loom.sim(config).iteration_time_s,
                         loom.sim(VLM, set={"parallel.pp": 2}).iteration_time_s)

    def test_a_hand_written_dict(self):
        config = tomllib.loads(pathlib.Path(UNIFORM).read_text())
        config["sim"]["backend"] = "evaluator"
        self.assertAlmostEqual(loom.sim(config).iteration_time_s, 0.033, places=9)


class Errors(unittest.TestCase):
    def test_a_wrong_key_names_it(self):
        with self.assertRaises(loom.InputError) as caught:
            loom.sim(UNIFORM, set={"parallel.ppp": 2})
        self.assertEqual(caught.exception.key, "parallel.ppp")
        self.assertIn("uniform-1f1b.toml", str(caught.exception))

    def test_a_bad_value_names_its_key(self):
        with self.assertRaises(loom.InputError) as caught:
            loom.load_config(UNIFORM, set={"parallel.pp": 0})
        self.assertEqual(caught.exception.key, "parallel.pp")

    def test_a_dict_with_an_unknown_table_names_it(self):
        config = tomllib.loads(pathlib.Path(UNIFORM).read_text())
        config["paralel"] = {"pp": 2}
        with self.assertRaises(loom.InputError) as caught:
            loom.sim(config)
        self.assertIn("<dict>", str(caught.exception))
        self.assertIn("paralel", str(caught.exception))

    def test_a_value_toml_cannot_hold(self):
        with self.assertRaises(loom.InputError) as caught:
            loom.sim(UNIFORM, set={"parallel.pp": object()})
        self.assertEqual(caught.exception.key, "parallel.pp")

    def test_an_unknown_backend(self):
        with self.assertRaises(loom.InputError) as caught:
            loom.sim(UNIFORM, backend="ns3")
        self.assertEqual(caught.exception.key, "sim.backend")

    def test_a_missing_file(self):
        with self.assertRaises(loom.InputError) as caught:
            loom.sim("no/such/config.toml")
        self.assertIn("no/such/config.toml", str(caught.exception))

    def test_a_run_that_does_not_fit_is_infeasible_in_either_backend(self):
        for backend in ("evaluator", "simgrid"):
            with self.assertRaises(loom.Infeasible) as caught:
                loom.sim(UNIFORM, backend=backend, set={"cluster.gpu_memory": "16MiB"})
            self.assertIn("memory", str(caught.exception))


class Sweeps(unittest.TestCase):
    def test_rows_are_the_cli_sweeps_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            study = pathlib.Path(tmp) / "study.toml"
            study.write_text(f'base = "{VLM}"\nschedulers = ["1f1b", "gpipe"]\n'
                             '[axes]\n"schedule.microbatches" = [4, 8]\n')
            cli("sweep", str(study), "--out", f"{tmp}/r", "-q")
            expected = json.loads((pathlib.Path(tmp) / "r/results.json").read_text())["rows"]
            rows = list(loom.sweep(str(study)))
        self.assertEqual(rows, expected)
        self.assertEqual([r["status"] for r in rows], ["ok"] * 4)

    def test_a_bad_study_raises_before_any_point_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            study = pathlib.Path(tmp) / "study.toml"
            study.write_text(f'base = "{VLM}"\n[axes]\n"schedule.microbatchez" = [4, 8]\n')
            with self.assertRaises(loom.InputError) as caught:
                next(loom.sweep(str(study)))
        self.assertIn("schedule.microbatchez", str(caught.exception))


class Listings(unittest.TestCase):
    def test_schedulers_are_the_clis(self):
        names = [line.split()[0] for line in cli("schedulers").splitlines() if line.strip()]
        self.assertEqual(list(loom.schedulers()), names)
        self.assertEqual(loom.backends(), ["evaluator", "simgrid"])


BIG = str(SOURCE / "configs/bench/pp16-dp64.toml")  # 1,024 ranks unfolded: seconds in SimGrid


class Interrupts(unittest.TestCase):
    def test_ctrl_c_stops_a_simgrid_run_and_leaves_no_child(self):
        script = (
            "import loom, os, signal, threading, time\n"
            "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
            "start = time.monotonic()\n"
            "try:\n"
            f"    loom.sim({BIG!r}, backend='simgrid', fold=False)\n"
            "    print('finished')\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted after', time.monotonic() - start)\n"
            "try:\n"
            "    os.waitpid(-1, os.WNOHANG)\n"
            "    print('a child is left')\n"
            "except ChildProcessError:\n"
            "    print('no child left')\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("interrupted after", done.stdout)
        self.assertIn("no child left", done.stdout)
        seconds = float(done.stdout.split("interrupted after")[1].split()[0])
        self.assertLess(seconds, 3.0)  # 1 s, then at most a poll (0.1 s) and the kill

    def test_the_gil_is_released_while_simulating(self):
        ticks = []
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.001)

        counter = threading.Thread(target=count)
        counter.start()
        start = time.monotonic()
        loom.sim(BIG, backend="evaluator", fold=False)
        took = time.monotonic() - start
        stop.set()
        counter.join()
        during = [t for t in ticks if start < t < start + took]
        # The counter kept running: ticks throughout the run, not only before and after.
        self.assertGreater(len(during), took / 0.001 / 50)  # with the GIL held: none


if __name__ == "__main__":
    unittest.main()
