"""`python -m examples.demo [--batches N]` from the repository root."""

from __future__ import annotations

import argparse

from examples.demo.run import main
from pipeline.logs import configure_logging

parser = argparse.ArgumentParser(prog="python -m examples.demo")
parser.add_argument("--batches", type=int, default=24, help="work batches to push through")
configure_logging("warning")
main(parser.parse_args().batches)
