"""`python -m qmkar.worker MODULE`: a worker process doing part of a command's work
(offload.py): ahead.py's questions made ahead, readers.py's part of the transcripts a report
reads, rescore.py's second half of a transcript.

It says which qmkar it runs, then MODULE's `serve` reads the job on stdin and answers on
stdout, in offload.py's frames. It is started in a session of its own, so the terminal's
Ctrl-C goes to the command only, which ends the worker by closing its stdin.
"""

import sys

from qmkar.offload import serve

if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].startswith("qmkar."):
        raise SystemExit("usage: python -m qmkar.worker qmkar.MODULE (started by qmkar itself)")
    try:
        serve(sys.argv[1])
    except BrokenPipeError:  # the command has gone
        pass
