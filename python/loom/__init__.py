"""Loom from Python: the CLI's studies as function calls (docs/python.md).

    import loom
    r = loom.sim("configs/examples/uniform-1f1b.toml")
    print(r.iteration_time_s, r.mfu)       # metrics.json's keys are attributes
    r.timeline                             # timeline.csv as a pandas DataFrame
    for row in loom.sweep("studies/example.toml"):
        print(row["scheduler"], row["iteration_time_s"])

Everything runs in the extension `_loom`, through the code the `loom` binary runs, so the
numbers are the CLI's, bit for bit. A config is a TOML file path or a dict of the same
tables; `set={"parallel.pp": 4}` overrides keys as `--set` does.
"""

import io
import json
import math
import re
import tomllib

from . import _loom

__all__ = ["InputError", "Infeasible", "Result", "load_config", "sim", "sweep", "schedulers",
           "backends"]


class InputError(ValueError):
    """Bad input: the CLI's exit 2. `key` is the config key the message names, if any."""

    def __init__(self, message):
        super().__init__(message)
        found = re.search(r"key '([^']+)'", message)
        self.key = found.group(1) if found else None


class Infeasible(RuntimeError):
    """A valid request that cannot run (out of memory, no layout fits): the CLI's exit 3."""


def _raising_loom_errors(call, *args):
    try:
        return call(*args)
    except _loom.InputError as e:
        raise InputError(str(e)) from None
    except _loom.InfeasibleError as e:
        raise Infeasible(str(e)) from None


# --- configs: a path, or a dict written as TOML ----------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key):
    if not isinstance(key, str):
        raise InputError(f"config key {key!r}: keys must be strings")
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value, where):
    """One TOML value (inline tables and arrays for nested dicts and lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # the shortest text that reads back as the same double
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v, f'{where}.{k}')}"
                               for k, v in value.items()) + "}"
    raise InputError(f"key '{where}': {type(value).__name__} is not a TOML value "
                     "(use str, int, float, bool, list or dict)")


def _toml_document(config):
    """A config dict as a TOML document: one line per top-level key."""
    return "".join(f"{_toml_key(k)} = {_toml_value(v, k)}\n" for k, v in config.items())


def _source(config):
    """(path, document or None) for the extension."""
    if isinstance(config, dict):
        return "<dict>", _toml_document(config)
    if isinstance(config, str) or hasattr(config, "__fspath__"):
        return str(config), None
    raise InputError(f"config: expected a TOML file path or a dict, got {type(config).__name__}")


def _overrides(set, backend=None, fold=True):
    out = []
    for key, value in (set or {}).items():
        if not isinstance(key, str) or "." not in key:
            raise InputError(f"set: key {key!r}: write it as section.key, e.g. 'parallel.pp'")
        out.append(f"{key}={_toml_value(value, key)}")
    if backend is not None:  # checked by the config reader, as --backend's override is
        out.append(f"sim.backend={_toml_value(backend, 'sim.backend')}")
    if not fold:
        out.append("sim.fold=false")
    return out


def load_config(config, set=None):
    """The resolved configuration (every key, defaults included) as a dict: what
    `loom config CONFIG --dump` prints. Files it names are absolute paths."""
    path, document = _source(config)
    text = _raising_loom_errors(_loom.resolved_config, path, document, _overrides(set))
    return tomllib.loads(text)


# --- one run -----------------------------------------------------------------------------

class Result:
    """One simulated iteration. Every key of metrics.json is an attribute
    (iteration_time_s, throughput_samples_per_s, bubble_fraction, tflops_per_gpu, mfu,
    per_rank, ...); `metrics` is the whole dict. `timeline` and `memory` are timeline.csv
    and memory.csv as pandas DataFrames, `schedule` the Schedule IR text (schedule.txt)."""

    def __init__(self, texts):
        self._texts = texts
        self.metrics = json.loads(texts["metrics"])
        self.schedule = texts["schedule"]

    def __getattr__(self, name):
        metrics = self.__dict__.get("metrics", {})
        if name in metrics:
            return metrics[name]
        raise AttributeError(f"Result has no attribute {name!r} (metrics.json keys: "
                             + ", ".join(sorted(metrics)) + ")")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.metrics))

    def __repr__(self):
        return (f"<loom.Result {self.metrics.get('scheduler')} on {self.metrics.get('backend')}: "
                f"iteration {self.iteration_time_s * 1e3:.3f} ms>")

    @property
    def timeline(self):
        import pandas  # only where DataFrames are asked for
        # Only an empty cell is missing (a module may be called "NA"): the microbatch of an
        # op that has none (an optimizer step, a gradient all-reduce) reads as NaN.
        return pandas.read_csv(io.StringIO(self._texts["timeline"]), keep_default_na=False,
                               na_values=[""])

    @property
    def memory(self):
        import pandas
        return pandas.read_csv(io.StringIO(self._texts["memory"]))

    def timeline_csv(self):
        """timeline.csv's text, byte for byte what `loom sim` writes."""
        return self._texts["timeline"]

    def memory_csv(self):
        """memory.csv's text, byte for byte what `loom sim` writes."""
        return self._texts["memory"]


def sim(config, set=None, backend=None, fold=True):
    """Plans `config` and simulates one iteration: `loom sim CONFIG` without the files.

    backend: "evaluator" (contention-free, fast) or "simgrid" (link contention); default:
    the config's sim.backend. fold=False simulates every data-parallel replica (--no-fold).
    The GIL is released while it runs; a SimGrid run goes to a child process (SimGrid runs
    once per process), which Ctrl-C stops at once.
    Raises InputError (bad config, key named) or Infeasible (does not fit, deadlocks)."""
    path, document = _source(config)
    texts = _raising_loom_errors(_loom.sim, path, document, _overrides(set, backend, fold))
    return Result(json.loads(texts))


# --- sweeps and listings -------------------------------------------------------------------

def sweep(study):
    """Runs a sweep study file (docs/sweep.md) point by point and yields each row as a dict
    (results.json's row: results.csv's columns, numbers as numbers) as soon as it finishes. The study is checked and every point
    resolved first (bad input raises before anything runs). Points run one at a time in this
    process (SimGrid points each in a child); `loom sweep STUDY -j N` runs them in parallel,
    resumes and shards. Stop early by leaving the loop; Ctrl-C stops between points (SimGrid:
    at once)."""
    plan = _raising_loom_errors(_loom.sweep_plan, str(study))
    columns = plan["columns"]
    for p in plan["points"]:
        row = _raising_loom_errors(_loom.sweep_row, p["index"], p["config"], p["overrides"],
                                   p["cells"], p["hash"], columns, plan["fresh_process"])
        yield dict(zip(columns, json.loads(row)))


def schedulers():
    """Every scheduler: {name: one-line summary}, in `loom schedulers` order."""
    return dict(_loom.schedulers())


def backends():
    """The simulation backends' names."""
    return list(_loom.backends())
