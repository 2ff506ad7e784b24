"""Shared helpers for Loom's plots: strict loaders, rank subsetting, colors, PNG output.

`loom sim` writes timeline.csv, memory.csv and metrics.json and then runs plot_all.py on
them. The loaders here check every field so that a malformed file fails with a message
naming the file, the line and the column, instead of a confusing matplotlib traceback or,
worse, a plausible but wrong picture.
"""

import json
import math
import os
import secrets
import sys
import traceback
from dataclasses import dataclass
from itertools import repeat

import matplotlib

# Headless and deterministic: pick the Agg backend before anything can import pyplot.
matplotlib.use("Agg")

import numpy as np  # noqa: E402  (after matplotlib.use on purpose)
from matplotlib.figure import Figure  # noqa: E402

TIMELINE_COLUMNS = ("rank", "kind", "module", "stage", "microbatch", "start_s", "end_s")
MEMORY_COLUMNS = ("rank", "time_s", "parameters_bytes", "gradients_bytes", "optimizer_bytes",
                  "activations_bytes", "total_bytes")
MEMORY_PARTS = ("parameters_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")

COMPUTE_KINDS = ("F", "B", "I", "W", "optimizer")
COMM_KINDS = ("send", "recv", "allreduce", "allgather", "reducescatter", "alltoall")

# Compute passes get saturated, clearly distinct hues; communication is drawn in greys so
# it reads as "not compute" at a glance and never competes with the schedule's shape.
KIND_COLORS = {
    "F": "#4C72B0",          # forward: blue
    "B": "#DD8452",          # full backward: orange
    "I": "#C44E52",          # input-gradient half of a split backward: red
    "W": "#55A868",          # weight-gradient half of a split backward: green
    "optimizer": "#8172B3",  # the optimizer step: purple
    "send": "#7F7F7F",
    "recv": "#C7C7C7",
    "allreduce": "#4D4D4D",
    "allgather": "#A6A6A6",
    "reducescatter": "#8C8C8C",
    "alltoall": "#666666",   # MoE token dispatch / combine
}
UNKNOWN_KIND_COLOR = "#B07AA1"  # a kind this script does not know yet: visible, not hidden
KIND_LABELS = {"F": "F (forward)", "B": "B (backward)", "I": "I (input grad)",
               "W": "W (weight grad)", "optimizer": "optimizer step"}

# Modules (vision, projector, llm, ...) are told apart by hatching, not color, so that
# color always means the pass kind. The first module is drawn solid.
MODULE_HATCHES = ("", "//", "\\\\", "..", "xx", "++", "o", "--")

DPI = 120            # fixed so that reruns give identical pixels
MAX_PLOTTED_RANKS = 32


class LoomInputError(Exception):
    """A malformed input file; carries where, so the CLI can print `file:line: what`."""

    def __init__(self, path, what, line=None, column=None):
        self.path = str(path)
        self.line = line
        self.column = column
        self.what = what
        super().__init__(self.location() + ": " + self.detail())

    def location(self):
        """`file:line`, or just `file` when the problem is not on one line."""
        return self.path if self.line is None else f"{self.path}:{self.line}"

    def detail(self):
        """The problem, prefixed by the column it is in when there is one."""
        return self.what if self.column is None else f"column '{self.column}': {self.what}"


@dataclass
class Timeline:
    """timeline.csv as column arrays: one element per operation, in file order.

    Text columns are stored as small integer codes into a list of names (in order of
    first appearance): comparing ints is what makes million-row timelines fast to plot.
    """

    path: str
    rank: np.ndarray         # int64
    kind_code: np.ndarray    # int64 index into kind_names
    kind_names: list
    module_code: np.ndarray  # int64 index into module_names
    module_names: list
    stage: np.ndarray        # int64
    microbatch: np.ndarray   # int64, -1 where the file leaves it empty (collectives)
    start_s: np.ndarray      # float64
    end_s: np.ndarray        # float64

    def __len__(self):
        return len(self.rank)

    @property
    def kind(self):
        """The kind of each operation as strings (convenient, slower than kind_code)."""
        return np.asarray(self.kind_names, dtype=str)[self.kind_code]

    @property
    def module(self):
        return np.asarray(self.module_names, dtype=str)[self.module_code]

    def ranks(self):
        """Sorted distinct ranks that have at least one operation."""
        return [int(r) for r in np.unique(self.rank)]

    def end_time_s(self):
        """When the last operation ends: the iteration time as the timeline sees it."""
        return float(self.end_s.max()) if len(self) else 0.0

    def codes_of(self, kinds):
        """kind_code values of the given kind names (absent names are skipped)."""
        return [i for i, k in enumerate(self.kind_names) if k in kinds]


@dataclass
class MemoryTrace:
    """memory.csv as column arrays. Per rank, each row's values hold until its next row."""

    path: str
    rank: np.ndarray
    time_s: np.ndarray
    parts: dict  # column name -> float64 array, for MEMORY_PARTS and total_bytes

    def ranks(self):
        """Sorted distinct ranks with at least one sample."""
        return [int(r) for r in np.unique(self.rank)]

    def series(self, rank, column="total_bytes"):
        """The step function of one rank: (times, values) in time order."""
        mask = self.rank == rank
        order = np.argsort(self.time_s[mask], kind="stable")
        return self.time_s[mask][order], self.parts[column][mask][order]

    def value_at(self, rank, t, column="total_bytes"):
        """The value in force at time t: the last row at or before t (0 before the first)."""
        times, values = self.series(rank, column)
        i = int(np.searchsorted(times, t, side="right")) - 1
        return float(values[i]) if i >= 0 else 0.0

    def peak_by_rank(self, column="total_bytes"):
        """{rank: maximum value}: a step function's peak is its largest row."""
        order = np.argsort(self.rank, kind="stable")
        ranks = self.rank[order]
        first = np.flatnonzero(np.r_[True, ranks[1:] != ranks[:-1]])
        peaks = np.maximum.reduceat(self.parts[column][order], first)
        return {int(r): float(p) for r, p in zip(ranks[first], peaks)}


# ----------------------------------------------------------------------------- loading


def _read_columns(path, expected):
    """Reads a CSV with a known header into {column: list of str}, one entry per row.

    Loom writes these files without quoting, so the whole body is split in one go (a
    per-line split or the csv module is several times slower on million-row timelines).
    Every line's field count is checked first, so row i is always line i + 2 (line 1 is
    the header) in the messages of the checks that follow.
    """
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise LoomInputError(path, "file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LoomInputError(path, f"cannot read: {e}") from None
    text = text.replace("\r\n", "\n")
    if text.endswith("\n"):
        text = text[:-1]  # the final newline ends the last row; it does not start a new one
    header_line, _, body = text.partition("\n")
    if not header_line.strip():
        raise LoomInputError(path, "empty file, expected header " + ",".join(expected), line=1)
    header = [h.strip() for h in header_line.split(",")]
    _check_header(path, header, expected)
    if not body:
        raise LoomInputError(path, "no data rows after the header", line=1)
    # split("\n") rather than splitlines(): exotic separators must not shift line numbers.
    lines = body.split("\n")
    width = len(header)
    commas = np.fromiter(map(str.count, lines, repeat(",")), dtype=np.int64, count=len(lines))
    if (commas != width - 1).any():
        i = int(np.argmax(commas != width - 1))
        got = "an empty line" if not lines[i].strip() else f"{commas[i] + 1} fields"
        raise LoomInputError(path, f"expected {width} fields, got {got}", line=i + 2)
    fields = body.replace("\n", ",").split(",")
    return {h: fields[k::width] for k, h in enumerate(header)}


def _check_header(path, header, expected):
    """Columns may come in any order, but each expected one exactly once and no others."""
    missing = [c for c in expected if c not in header]
    if missing:
        raise LoomInputError(path, "missing column(s) " + ", ".join(missing), line=1)
    extra = [c for c in header if c not in expected]
    if extra:
        raise LoomInputError(path, "unexpected column(s) " + ", ".join(extra), line=1)
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise LoomInputError(path, "duplicate column(s) " + ", ".join(dupes), line=1)


def _report_first_bad(path, column, values, convert, what):
    """Finds and reports the first value `convert` rejects (the slow path, errors only)."""
    for i, v in enumerate(values):
        try:
            convert(v)
        except (ValueError, OverflowError):
            raise LoomInputError(path, f"{what}, got '{v}'", line=i + 2, column=column) from None
    raise AssertionError(f"{path}: column {column}: fast parse failed on no value")


def _check_minimum(path, column, values, array, minimum):
    """Rejects the first value below minimum."""
    low = array < minimum
    if low.any():
        i = int(np.argmax(low))
        raise LoomInputError(path, f"must be >= {minimum:g}, got {values[i].strip()}",
                             line=i + 2, column=column)


def _ints(path, column, values, minimum=None):
    """Parses a column of integers, each >= minimum when one is given."""
    try:
        out = np.fromiter(map(int, values), dtype=np.int64, count=len(values))
    except (ValueError, OverflowError):
        _report_first_bad(path, column, values, int, "expected an integer")
        raise  # unreachable: _report_first_bad always raises
    if minimum is not None:
        _check_minimum(path, column, values, out, minimum)
    return out


def _optional_counts(path, column, values):
    """Parses non-negative integers where blank means "none" (stored as -1).

    Prefixing "0" turns blanks into 0 and keeps every digit string's value, so the whole
    column converts in one C-level pass; a sign no longer parses, which is right here.
    """
    convert = lambda v: int("0" + v)  # noqa: E731
    try:
        out = np.fromiter(map(int, map("0".__add__, values)), dtype=np.int64,
                          count=len(values))
    except (ValueError, OverflowError):
        _report_first_bad(path, column, values, convert,
                          "expected a non-negative integer or nothing")
        raise  # unreachable: _report_first_bad always raises
    blank = np.fromiter(map(len, map(str.strip, values)), dtype=np.int64,
                        count=len(values)) == 0
    out[blank] = -1
    return out


def _floats(path, column, values, minimum=0.0):
    """Parses a column of finite numbers >= minimum (times and byte counts)."""
    try:
        out = np.array(values, dtype=np.float64)
    except (ValueError, OverflowError):
        _report_first_bad(path, column, values, float, "expected a number")
        raise  # unreachable: _report_first_bad always raises
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.argmax(bad))
        raise LoomInputError(path, f"expected a finite number, got '{values[i]}'", line=i + 2,
                             column=column)
    if minimum is not None:
        _check_minimum(path, column, values, out, minimum)
    return out


def _categories(path, column, values, allow_empty):
    """A text column as (codes, names), names in order of first appearance."""
    names = list(dict.fromkeys(values))
    if any(n != n.strip() for n in names):  # rare: strip, then merge what became equal
        values = [v.strip() for v in values]
        names = list(dict.fromkeys(values))
    index = {n: i for i, n in enumerate(names)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    if not allow_empty and "" in index:
        i = int(np.argmax(codes == index[""]))
        raise LoomInputError(path, "must not be empty", line=i + 2, column=column)
    return codes, names


def load_timeline(path):
    """Loads and validates timeline.csv (one row per operation); raises LoomInputError."""
    path = str(path)
    cols = _read_columns(path, TIMELINE_COLUMNS)
    rank = _ints(path, "rank", cols["rank"], minimum=0)
    kind_code, kind_names = _categories(path, "kind", cols["kind"], allow_empty=False)
    module_code, module_names = _categories(path, "module", cols["module"], allow_empty=True)
    stage = _ints(path, "stage", cols["stage"])
    microbatch = _optional_counts(path, "microbatch", cols["microbatch"])
    start = _floats(path, "start_s", cols["start_s"])
    end = _floats(path, "end_s", cols["end_s"])
    backwards = end < start
    if backwards.any():
        i = int(np.argmax(backwards))
        raise LoomInputError(path, f"ends ({cols['end_s'][i]}) before it starts "
                             f"({cols['start_s'][i]})", line=i + 2, column="end_s")
    return Timeline(path=path, rank=rank, kind_code=kind_code, kind_names=kind_names,
                    module_code=module_code, module_names=module_names, stage=stage,
                    microbatch=microbatch, start_s=start, end_s=end)


def load_memory(path):
    """Loads and validates memory.csv; each rank's rows must go forward in time."""
    path = str(path)
    cols = _read_columns(path, MEMORY_COLUMNS)
    rank = _ints(path, "rank", cols["rank"], minimum=0)
    time_s = _floats(path, "time_s", cols["time_s"])
    parts = {c: _floats(path, c, cols[c]) for c in MEMORY_PARTS + ("total_bytes",)}
    _check_time_order(path, rank, time_s)
    return MemoryTrace(path=path, rank=rank, time_s=time_s, parts=parts)


def _check_time_order(path, rank, time_s):
    """A step function with time going backwards has no single meaning: reject it."""
    order = np.argsort(rank, kind="stable")
    r, t = rank[order], time_s[order]
    bad = (r[1:] == r[:-1]) & (t[1:] < t[:-1])
    if bad.any():
        i = int(order[1:][bad].min())
        raise LoomInputError(path, f"time goes backwards for rank {rank[i]}", line=i + 2,
                             column="time_s")


def load_json_object(path, required=True):
    """A JSON file whose top level is an object, as (dict, text); None when absent and not
    required. The text is returned so that callers can point at the line of a bad key."""
    path = str(path)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if not required:
            return None
        raise LoomInputError(path, "file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LoomInputError(path, f"cannot read: {e}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise LoomInputError(path, f"invalid JSON: {e.msg}", line=e.lineno) from None
    if not isinstance(value, dict):
        raise LoomInputError(path, "expected a JSON object at the top level", line=1)
    return value, text


def load_metrics(path, required=True):
    """Loads metrics.json as a dict; None when absent and not required.

    Only the keys the plots use are type-checked; the rest of the file is Loom's business.
    """
    path = str(path)
    loaded = load_json_object(path, required)
    if loaded is None:
        return None
    metrics, _ = loaded
    for key in ("iteration_time_s", "throughput_samples_per_s", "bubble_fraction"):
        if key in metrics and not _is_number(metrics[key]):
            raise LoomInputError(path, f"key '{key}': expected a number, got {metrics[key]!r}")
    for key in ("scheduler", "backend"):
        if key in metrics and not isinstance(metrics[key], str):
            raise LoomInputError(path, f"key '{key}': expected a string, got {metrics[key]!r}")
    if "microbatches" in metrics and not isinstance(metrics["microbatches"], int):
        raise LoomInputError(path, "key 'microbatches': expected an integer")
    layout = metrics.get("layout")
    if layout is not None and not (isinstance(layout, dict) and
                                   all(isinstance(layout.get(k), int) for k in ("pp", "dp", "tp"))):
        raise LoomInputError(path, "key 'layout': expected {pp, dp, tp} integers")
    return metrics


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ----------------------------------------------------------------------------- ranks


def select_ranks(ranks, cap=MAX_PLOTTED_RANKS):
    """At most `cap` evenly spaced ranks, always the first and the last.

    A plot of 1,024 ranks is unreadable and slow; the ends of a pipeline (first and last
    stage) are where schedules differ most, so they are always kept.
    """
    ranks = sorted(ranks)
    n = len(ranks)
    if n <= cap:
        return ranks
    if cap <= 1:
        return ranks[:cap]
    picks = sorted({round(i * (n - 1) / (cap - 1)) for i in range(cap)})
    return [ranks[i] for i in picks]


def parse_rank_list(text, available, path="--ranks"):
    """Parses `0,1,5` (or ranges like `0-3`) and checks each rank exists in the run."""
    chosen = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                chosen.extend(range(int(lo), int(hi) + 1))
            else:
                chosen.append(int(part))
        except ValueError:
            raise LoomInputError(path, f"expected ranks like 0,1,5 or 0-3, got '{text}'") from None
    if not chosen:
        raise LoomInputError(path, f"no ranks in '{text}'")
    missing = sorted(set(chosen) - set(available))
    if missing:
        raise LoomInputError(path, "no such rank(s) in the run: " + ",".join(map(str, missing))
                             + f" (the run has {len(available)} ranks)")
    return sorted(set(chosen))


def rank_subset_note(shown, total):
    """Title fragment saying the plot shows a subset, or '' when it shows everything."""
    return "" if shown == total else f"showing {shown} of {total} ranks"


# ----------------------------------------------------------------------------- style


def kind_color(kind):
    """Color of an operation kind; unknown kinds get one shared, visible color."""
    return KIND_COLORS.get(kind, UNKNOWN_KIND_COLOR)


def is_compute(kind):
    return kind in COMPUTE_KINDS


def kind_order(kinds):
    """Known kinds in a fixed order (compute first), then unknown ones alphabetically."""
    known = [k for k in COMPUTE_KINDS + COMM_KINDS if k in kinds]
    return known + sorted(set(kinds) - set(known))


def module_hatch(index):
    return MODULE_HATCHES[index % len(MODULE_HATCHES)]


def new_figure(width_in, height_in, left_in, right_in, top_in, bottom_in):
    """A Figure with one Axes placed by fixed margins (inches), returned as (fig, ax).

    Fixed margins instead of constrained layout: the layout is known before drawing (the
    Gantt chart sizes its labels from it) and saving needs one draw instead of two. The
    Figure is not registered with pyplot, so there is nothing global to close or leak.
    """
    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    fig.subplots_adjust(left=left_in / width_in, right=1 - right_in / width_in,
                        top=1 - top_in / height_in, bottom=bottom_in / height_in)
    return fig, fig.add_subplot()


def describe_run(metrics):
    """`1f1b on simgrid` from metrics.json, or '' when it is not known."""
    if not metrics:
        return ""
    sched = metrics.get("scheduler")
    backend = metrics.get("backend")
    if sched and backend:
        return f"{sched} on {backend}"
    return sched or backend or ""


# ----------------------------------------------------------------------------- output


def save_png(fig, path):
    """Writes fig as PNG atomically and byte-reproducibly.

    The PNG goes to a hidden temporary name in the same directory and is renamed onto
    `path` only once complete, so a failure never leaves a truncated image behind. The
    Software tag (matplotlib version) is dropped and the dpi is fixed, so the same inputs
    give the same bytes.
    """
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory,
                       f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:  # mode 0666 & ~umask, like any other output file
            fig.savefig(f, format="png", dpi=DPI, metadata={"Software": None})
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def run_cli(prog, main, argv):
    """Runs main(argv) with Loom's exit codes: 0 ok, 2 bad input, 1 anything else."""
    try:
        return main(argv) or 0
    except LoomInputError as e:
        print(f"{prog}: error: {e.location()}: {e.detail()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug here must not look like bad input
        traceback.print_exc()
        print(f"{prog}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
