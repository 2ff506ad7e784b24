"""Loom's Chakra traces read by a reader that knows nothing of Loom (issue 52):
analysis/chakra_dump.py, on Debian's python3-protobuf and the classes protoc generates from
app/chakra/et_def.proto. It checks what ASTRA-sim relies on: every file parses, node ids
are unique, dependencies stay in the file and form no cycle, every send has exactly one
receive with the same (src, dst, tag) and size, every collective names a group of
comm_group.json that holds its rank; the nodes are the ops of `loom schedule export
--format loom` in order; and the DAG alone, run with zero-cost messages, gives the
iteration time Loom's evaluator gives on a config whose messages cost nothing.

Run by ctest with LOOM=<loom binary>, LOOM_SOURCE=<repository>, CHAKRA_PB2=<folder of
et_def_pb2.py>."""

import collections
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

from loom_cli import SOURCE, UNIFORM, VLM, cli

sys.path.insert(0, str(SOURCE / "analysis"))
import chakra_dump  # noqa: E402

chakra = chakra_dump.load_schema()
attrs = chakra_dump.attrs


def read_folder(folder):
    return chakra_dump.read_folder(chakra, folder)


def loom_ops(config, *args):
    """Each rank's op names from `loom schedule export --format loom`."""
    with tempfile.TemporaryDirectory() as out:
        cli("schedule", "export", config, "--format", "loom", "--out", f"{out}/s.txt", *args)
        ops = []
        for line in pathlib.Path(f"{out}/s.txt").read_text().splitlines():
            if line.startswith("rank "):
                ops.append([])
            elif line.startswith("  ") and ops:
                ops[-1].append(line.split()[0])
        return ops


def dag_time(traces):
    """End of the last node when every node starts once its dependencies have ended, a
    compute lasts duration_micros, a send ends when it starts and a receive once its send
    has (messages cost nothing). Collectives are not modelled: used where there are none."""
    nodes = {(r, n.id): n for r, (_, ns) in enumerate(traces) for n in ns}
    sends = {}
    for (r, _), n in nodes.items():
        if n.type == chakra.COMM_SEND_NODE:
            a = attrs(n)
            sends[(r, a["comm_dst"], a["comm_tag"])] = (r, n.id)
    end = {}

    def finish(key):
        if key in end:
            return end[key]
        stack = [key]
        while stack:
            k = stack[-1]
            n = nodes[k]
            before = [(k[0], d) for d in list(n.ctrl_deps) + list(n.data_deps)]
            if n.type == chakra.COMM_RECV_NODE:
                a = attrs(n)
                before.append(sends[(a["comm_src"], k[0], a["comm_tag"])])
            waiting = [b for b in before if b not in end]
            if waiting:
                stack.extend(waiting)
                continue
            start = max((end[b] for b in before), default=0)
            end[k] = start + (n.duration_micros if n.type == chakra.COMP_NODE else 0)
            stack.pop()
        return end[key]

    return max(finish(k) for k in nodes)


class ChakraTraces(unittest.TestCase):
    def export(self, config, *args):
        out = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", out]))
        cli("schedule", "export", config, "--format", "chakra", "--out", f"{out}/et", *args)
        return f"{out}/et"

    def check_structure(self, config, *args):
        traces, groups = read_folder(self.export(config, *args))
        self.assertEqual([[n.name for n in ns] for _, ns in traces], loom_ops(config, *args))
        sends, recvs = collections.Counter(), collections.Counter()
        kinds = collections.Counter()
        for rank, (metadata, nodes) in enumerate(traces):
            self.assertEqual(metadata.version, "0.0.4")
            ids = [n.id for n in nodes]
            self.assertEqual(len(ids), len(set(ids)), f"rank {rank}: duplicate ids")
            seen = set()
            for n in nodes:  # file order is a topological order: no cycle, nothing missing
                for d in list(n.ctrl_deps) + list(n.data_deps):
                    self.assertIn(d, seen, f"rank {rank} node {n.id} depends on {d}")
                seen.add(n.id)
                a = attrs(n)
                kinds[chakra.NodeType.Name(n.type)] += 1
                if n.type == chakra.COMM_SEND_NODE:
                    sends[(rank, a["comm_dst"], a["comm_tag"], a["comm_size"])] += 1
                elif n.type == chakra.COMM_RECV_NODE:
                    recvs[(a["comm_src"], rank, a["comm_tag"], a["comm_size"])] += 1
                elif n.type == chakra.COMM_COLL_NODE:
                    self.assertIn(a["comm_type"], (chakra.ALL_REDUCE, chakra.ALL_GATHER,
                                                   chakra.REDUCE_SCATTER, chakra.ALL_TO_ALL))
                    self.assertIn(rank, groups[a["pg_name"]])
                else:
                    self.assertEqual(n.type, chakra.COMP_NODE)
                    self.assertFalse(a["is_cpu_op"])
        self.assertEqual(sends, recvs)  # each (src, dst, tag, size) once on both sides
        self.assertTrue(all(c == 1 for c in sends.values()))
        return traces, kinds

    def test_pipeline_structure_and_dag_time(self):
        traces, kinds = self.check_structure(UNIFORM)
        self.assertEqual(kinds["COMM_SEND_NODE"], 48)  # 8 microbatches x 3 boundaries x 2
        metrics = json.loads(self.sim_metrics(UNIFORM))
        self.assertEqual(dag_time(traces), round(metrics["iteration_time_s"] * 1e6))  # 33,000

    def test_collectives_name_their_groups(self):
        two = ["--set", "cluster.nodes=2", "--set", "parallel.dp=2"]
        for args in (two + ["--set", "parallel.overlap_grad_reduce=true"],
                     two + ["--set", "parallel.fsdp=true"]):
            traces, kinds = self.check_structure(VLM, *args)
            self.assertGreater(kinds["COMM_COLL_NODE"], 0)
            # Async collectives are waited for through data_deps (the optimizer step's
            # last bucket; FSDP: each layer's gather); ctrl_deps stay empty.
            waits = 0
            for _, ns in traces:
                collectives = {n.id for n in ns if n.type == chakra.COMM_COLL_NODE}
                waits += sum(1 for n in ns if n.type == chakra.COMP_NODE and
                             collectives & set(n.data_deps))
                self.assertFalse(any(n.ctrl_deps for n in ns))
            self.assertGreater(waits, 0)

    def test_dump_prints_every_node(self):
        folder = self.export(UNIFORM)
        with tempfile.TemporaryFile("w+") as out:
            saved, sys.stdout = sys.stdout, out
            try:
                self.assertEqual(chakra_dump.main([folder, "--rank", "1"]), 0)
            finally:
                sys.stdout = saved
            out.seek(0)
            lines = out.read().splitlines()
        self.assertEqual(lines[0], "# rank 1: schema 0.0.4, 48 nodes")
        self.assertRegex(lines[1], r"^ +0 1RECV_F0:L2<-0 +COMM_RECV_NODE +comm_src=0 comm_tag=0 ")

    def test_dump_names_a_truncated_file(self):
        folder = self.export(UNIFORM)
        path = pathlib.Path(folder) / "loom.1.et"
        path.write_bytes(path.read_bytes()[:-3])
        self.assertEqual(chakra_dump.main([folder]), 2)

    def sim_metrics(self, config):
        with tempfile.TemporaryDirectory() as out:
            cli("sim", config, "--backend", "evaluator", "--no-plot", "-q", "--out", f"{out}/r")
            return pathlib.Path(f"{out}/r/metrics.json").read_text()


if __name__ == "__main__":
    unittest.main()
