"""`python -m qmkar` runs the command line."""

from qmkar.cli import main

main()
