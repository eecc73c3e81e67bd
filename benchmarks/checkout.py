"""What the benchmarks take as --baseline: another checkout's src folder, checked when parsed.

Each benchmark runs the baseline as `python -m qmkar` with PYTHONPATH set to it; a folder
without qmkar/ in it would run the installed qmkar instead, measuring this code against
itself without a word.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def src_folder(text: str) -> str:
    """argparse type of --baseline: the path as given, once it holds qmkar/__init__.py."""
    if not (Path(text) / "qmkar" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(
            f"{text} is not a checkout's src folder (one holding qmkar/); for a commit, "
            "`git worktree add /tmp/base COMMIT` and give /tmp/base/src")
    return text
