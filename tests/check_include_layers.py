#!/usr/bin/env python3
"""Fail when folders of Loom's sources include each other in a cycle.

A quoted `#include "a/b/c.hpp"` in a file of folder X makes X depend on folder a/b.
Dependencies are checked level by level, each folder with everything under it: at the
top, core, schedulers, sim, cli, ... must not include each other in a cycle; inside
schedulers/, lowering/, planners/ (with cp/, layout/, ...), llm/, ... and the files of
schedulers/ itself must not either; and so on down. So when schedulers/lowering includes
schedulers/planners/cp, no planner (schedulers/planners/layout, say) may include the
lowering back, directly or through other folders.

Usage: check_include_layers.py [SOURCE_ROOT]   (default: the repository of this script)
Prints each cycle with one include that makes each of its edges, and exits 1.
"""

import pathlib
import re
import sys

# Folders whose sources form the layered libraries and the CLI on top of them.
ROOTS = ("core", "schedulers", "traces", "replay", "kernels", "sim", "executor", "cli", "app",
         "python")
SUFFIXES = {".hpp", ".cpp", ".h", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)

# Cycles known and being removed elsewhere: reported, not failed. Each is the sorted list
# of the nodes of one cycle, as printed.
KNOWN: set = set()  # cycles allowed while a move is under way; none today


def folder_edges(root: pathlib.Path) -> dict[tuple[str, str], str]:
    """(from folder, to folder) -> one `file: #include` that makes the edge."""
    edges: dict[tuple[str, str], str] = {}
    for top in ROOTS:
        if not (root / top).is_dir():
            continue
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root)
            src = rel.parent.as_posix()
            for target in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
                dst = pathlib.PurePosixPath(target).parent.as_posix()
                # Only the repository's own folders count (not "toml++/toml.h").
                if dst != src and dst.split("/")[0] in ROOTS:
                    edges.setdefault((src, dst), f'{rel.as_posix()}: #include "{target}"')
    return edges


def node(level: list[str], folder: list[str]) -> str:
    """The node that stands for `folder` among the children of `level`: "level/child/"
    (the child with everything under it), or "level/*" for the files of `level` itself."""
    if len(folder) == len(level):
        return "/".join(level) + "/*"
    return "/".join(folder[: len(level) + 1]) + "/"


def level_graphs(edges: dict[tuple[str, str], str]) -> dict[str, dict[tuple[str, str], str]]:
    """For each folder, the edges between its children (and its own files) that the
    folder-to-folder edges make, at the deepest folder holding both ends."""
    levels: dict[str, dict[tuple[str, str], str]] = {}
    for (src, dst), why in edges.items():
        a, b = src.split("/"), dst.split("/")
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        level = a[:common]
        levels.setdefault("/".join(level), {}).setdefault((node(level, a), node(level, b)), why)
    return levels


def cycles(graph_edges: dict[tuple[str, str], str]) -> list[list[str]]:
    """One shortest cycle per strongly connected component of more than one node."""
    graph: dict[str, list[str]] = {}
    for src, dst in sorted(graph_edges):
        graph.setdefault(src, []).append(dst)
        graph.setdefault(dst, [])

    def reach(start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reachable = {n: reach(n) for n in graph}  # a few dozen folders: quadratic is fine
    done: set[str] = set()
    found = []
    for start in sorted(graph):
        component = {n for n in reachable[start] if start in reachable[n]}
        if start in done or len(component) < 2:
            continue
        done |= component
        found.append(shortest_cycle(graph, component, start))
    return found


def shortest_cycle(graph: dict[str, list[str]], members: set[str], start: str) -> list[str]:
    """start -> ... -> start inside one component, by breadth-first search."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for here in frontier:
            for nxt in graph[here]:
                if nxt == start:
                    path = [here]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return list(reversed(path)) + [start]
                if nxt in members and nxt not in parent:
                    parent[nxt] = here
                    following.append(nxt)
        frontier = following
    raise AssertionError("a strongly connected component without a cycle")


def main() -> int:
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1]
    edges = folder_edges(root.resolve())
    failed = False
    seen_known = set()
    for level, graph_edges in sorted(level_graphs(edges).items()):
        for cycle in cycles(graph_edges):
            key = tuple(sorted(set(cycle)))
            known = key in KNOWN
            seen_known.add(key)
            failed |= not known
            where = level or "the top level"
            print(f"{'known ' if known else ''}include cycle in {where}: " + " -> ".join(cycle))
            for src, dst in zip(cycle, cycle[1:]):
                print(f"  {src} -> {dst}   ({graph_edges[(src, dst)]})")
    for gone in sorted(KNOWN - seen_known):
        print(f"note: the known cycle {' <-> '.join(gone)} is gone; remove it from KNOWN")
    if failed:
        print("Folders must include each other one way only: move what both sides need into a "
              "folder below both (as schedulers/planners/partition/ is below the lowering and "
              "the layout planner), see docs/architecture.md.")
        return 1
    print(f"{len(edges)} include edges between folders, no new cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
