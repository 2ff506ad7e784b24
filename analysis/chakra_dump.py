#!/usr/bin/python3
"""Prints a folder of Chakra execution traces (`loom schedule export --format chakra`, or
any producer's PREFIX.RANK.et) one node per line: id, name, type, dependencies, duration
and attributes. A reader of its own that knows nothing of Loom: Debian's python3-protobuf
and the et_def_pb2 protoc generates from app/chakra/et_def.proto (the build writes it to
build/generated/app/chakra; CHAKRA_PB2=DIR or --pb2 DIR name another folder). The tests
read traces through it (tests/python/test_chakra_reader.py).

Exit codes: 0 ok, 2 malformed input (the message names the file), 1 internal error.
"""

import argparse
import json
import os
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def load_schema(folder=None):
    """The generated et_def_pb2 module."""
    folder = folder or os.environ.get("CHAKRA_PB2") or REPO / "build/generated/app/chakra"
    sys.path.insert(0, str(folder))
    try:
        import et_def_pb2
    except ImportError as e:
        sys.exit(f"chakra_dump.py: no et_def_pb2 in {folder} ({e}): build Loom first, or pass --pb2")
    return et_def_pb2


def varint(data, at, path):
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError(f"{path}: truncated inside a length prefix")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def read_trace(schema, path):
    """(GlobalMetadata, [Node]) of one .et file: varint-length-prefixed messages."""
    data = pathlib.Path(path).read_bytes()
    messages, at = [], 0
    while at < len(data):
        size, at = varint(data, at, path)
        if at + size > len(data):
            raise ValueError(f"{path}: truncated: a message at byte {at} needs {size} bytes")
        messages.append(data[at:at + size])
        at += size
    if not messages:
        raise ValueError(f"{path}: empty")
    metadata = schema.GlobalMetadata.FromString(messages[0])
    return metadata, [schema.Node.FromString(m) for m in messages[1:]]


def attrs(node):
    """A node's (or the metadata's) attributes as a dict name -> value."""
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr if a.WhichOneof("value")}


def trace_paths(folder):
    """PREFIX.0.et, PREFIX.1.et, ... in rank order: one prefix, ranks from 0 without gaps."""
    ranked, prefixes = {}, set()
    for p in pathlib.Path(folder).iterdir():
        m = re.fullmatch(r"(.+)\.(\d+)\.et", p.name)
        if m:
            ranked[int(m[2])] = p
            prefixes.add(m[1])
    if not ranked:
        raise ValueError(f"{folder}: no PREFIX.RANK.et files")
    if len(prefixes) > 1:
        raise ValueError(f"{folder}: traces with several prefixes {sorted(prefixes)}")
    if sorted(ranked) != list(range(len(ranked))):
        raise ValueError(f"{folder}: ranks {sorted(ranked)} do not run from 0 without gaps")
    return [ranked[r] for r in range(len(ranked))]


def read_folder(schema, folder):
    """[(metadata, nodes)] per rank, and comm_group.json ({} when there is none)."""
    groups = pathlib.Path(folder) / "comm_group.json"
    return ([read_trace(schema, p) for p in trace_paths(folder)],
            json.loads(groups.read_text()) if groups.exists() else {})


def describe(schema, node, show_loom):
    shown = {k: v for k, v in attrs(node).items() if show_loom or not k.startswith("loom_")}
    deps = ""
    if node.ctrl_deps:
        deps += f" ctrl={list(node.ctrl_deps)}"
    if node.data_deps:
        deps += f" data={list(node.data_deps)}"
    duration = f" {node.duration_micros}us" if node.duration_micros else ""
    extra = " ".join(f"{k}={v}" for k, v in shown.items())
    return f"{node.id:>5} {node.name:<22} {schema.NodeType.Name(node.type):<15}{duration}{deps} {extra}"


def main(argv=None):
    p = argparse.ArgumentParser(prog="chakra_dump.py", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", metavar="DIR", help="folder of PREFIX.RANK.et files")
    p.add_argument("--rank", type=int, help="only this rank")
    p.add_argument("--loom", action="store_true", help="also print Loom's loom_* attributes")
    p.add_argument("--pb2", help="folder of et_def_pb2.py (default: the build tree's)")
    args = p.parse_args(argv)
    schema = load_schema(args.pb2)
    from google.protobuf.message import DecodeError
    try:
        traces, groups = read_folder(schema, args.folder)
    except (OSError, ValueError, DecodeError) as e:
        print(f"chakra_dump.py: {e}", file=sys.stderr)
        return 2
    for rank, (metadata, nodes) in enumerate(traces):
        if args.rank is not None and rank != args.rank:
            continue
        print(f"# rank {rank}: schema {metadata.version}, {len(nodes)} nodes")
        for node in nodes:
            print(describe(schema, node, args.loom))
    if groups and args.rank is None:
        print(f"# comm_group.json: {json.dumps(groups)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
