"""`python -m qmkar` runs the command line, as the `qmkar` command does (launch.py)."""

from qmkar.launch import main

main()
