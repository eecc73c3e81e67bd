"""The `qmkar` command's entry point (and `python -m qmkar`'s): start the worker process a
large reading will use before the command's own imports, then run the command line (cli.main).

report, compare and plot read large transcripts with a second process (readers.py), and
rescore rescores the second half of one in a worker (halves.py). A worker takes about a third
of a second to start, most of it its imports, and it could only be started once the
command's own imports (about half a second) were done. Started here, from the command's name
and the size of the files it names, it imports while the command does: a rescore of 100k
records, which used to wait for its worker, ended 0.28 to 0.74 s sooner in three runs of
benchmarks/downstream.py; report, compare and plot, whose reader was seldom waited for,
showed no clear change (docs/performance.md, thirty-first pass). The command still decides
by itself whether to split its reading and uses this worker when it does (offload.start);
one it does not use is stopped when it ends (offload.stop_all). This module imports only
offload.py, which imports only the standard library, so a command that starts no worker
pays only for looking at the sizes of the files it names.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qmkar import offload

# The commands that read in two processes, the worker each starts, and the fewest bytes of
# the files named with which it starts one: readers._parts gives a reader the last SHARE
# (0.42) of the bytes when that is at least SPLIT_MIN (24 MiB), halves.second_part splits
# from SPLIT_MIN (32 MiB). tests/test_launch.py holds these to those modules' values.
READERS_MIN = int((24 << 20) / 0.42)
RESCORE_MIN = 32 << 20
EARLY = {"report": ("qmkar.readers", READERS_MIN), "compare": ("qmkar.readers", READERS_MIN),
         "plot": ("qmkar.readers", READERS_MIN), "rescore": ("qmkar.rescore", RESCORE_MIN)}


def named_bytes(args: list[str]) -> int:
    """The bytes in the files the arguments name, and in the *.jsonl files of the folders they
    name (what transcript.files reads); arguments that name neither count nothing."""
    total = 0
    for arg in args:
        if arg.startswith("-"):
            continue
        path = Path(arg)
        try:
            if path.is_dir():
                total += sum(found.stat().st_size for found in path.glob("*.jsonl") if found.is_file())
            elif path.is_file():
                total += path.stat().st_size
        except OSError:  # the command says what is wrong with it
            continue
    return total


def early_worker(args: list[str]) -> None:
    """Prestart the worker the command in `args` (sys.argv[1:]) will want, when it is one that
    reads in two processes, the files it names are large enough, the machine has a second
    CPU and no help was asked for."""
    if not args or args[0] not in EARLY or "--help" in args or offload.cpus() < 2:
        return
    module, least = EARLY[args[0]]
    if named_bytes(args[1:]) >= least:
        offload.prestart(module)


def main() -> None:
    early_worker(sys.argv[1:])
    from qmkar.cli import main as command_line

    command_line()
