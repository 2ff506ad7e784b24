#!/usr/bin/env python3
"""Fail when a file of the project points at the development workspace's shared folder.

Loom was built next to a folder of papers, specs and datasets that a user's clone does not
have; code and docs cite the original sources (the paper, datasheet or dataset) instead.
This walks the tracked tree (everything but build folders and .git) and prints every line
that names that folder by a relative path.

Usage: check_self_contained.py [SOURCE_ROOT]   (default: the repository of this script)
Exits 1 and lists `file:line: text` for each reference.
"""

import pathlib
import re
import sys

# "../" + "shared/" spelled apart so that this file does not match itself.
REFERENCE = re.compile(re.escape(".." + "/shared") + r"\b")
SKIP_DIRS = {".git", "out", "__pycache__"}
# The fixture that shows the check failing (tests/CMakeLists.txt runs it on this folder).
FIXTURE = pathlib.PurePosixPath("tests/data/shared_reference")
TEXT_SUFFIXES = {".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".toml", ".txt",
                 ".cmake", ".json", ".csv", ".yml", ".yaml", ""}


def references(root: pathlib.Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.startswith("build") for part in rel.parts):
            continue
        if FIXTURE in pathlib.PurePosixPath(rel.as_posix()).parents:
            continue
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if REFERENCE.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    found = references(root.resolve())
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} reference(s) to the workspace's shared folder: cite the original "
              "source (paper, datasheet, dataset) instead")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
