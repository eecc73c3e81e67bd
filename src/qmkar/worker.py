"""`python -m qmkar.worker`: the process that generates a run's questions ahead (ahead.py).

It reads its job and requests on stdin and writes the items on stdout, in ahead.py's
frames, until stdin closes. It is started in a session of its own, so the terminal's
Ctrl-C goes to the run only.
"""

import sys

from qmkar.ahead import serve

if __name__ == "__main__":
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:  # the run has gone
        pass
