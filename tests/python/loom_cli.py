"""What the Python tests share: the repository and the `loom` binary ctest names
(LOOM_SOURCE, LOOM), the two example configs, and running the CLI."""

import os
import pathlib
import subprocess

SOURCE = pathlib.Path(os.environ["LOOM_SOURCE"])
LOOM = os.environ["LOOM"]
UNIFORM = str(SOURCE / "configs/examples/uniform-1f1b.toml")  # its messages cost nothing
VLM = str(SOURCE / "configs/examples/vlm-frozen.toml")


def cli(*args):
    """`loom ARGS`'s stdout; AssertionError with its stderr when it fails."""
    done = subprocess.run([LOOM, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"loom {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout
