"""`python -m qmkar.worker JOB`: a second process doing part of a command's work.

`generate` makes a run's questions ahead (ahead.py); `read` reads transcripts for compare,
plot and the HTML report (readers.py). It reads its job on stdin and writes what it made on
stdout, in ahead.py's frames, saying first which qmkar it runs. It is started in a session of
its own, so the terminal's Ctrl-C goes to the command only, which stops it.
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["read"]:
        from qmkar.readers import serve
    else:
        from qmkar.ahead import serve
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:  # the command has gone
        pass
