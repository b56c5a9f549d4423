"""The `seer` command line: run the main job, start one actor, benchmarks, keys."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pipeline.cli import actor, bench, generate, keys, profile, rollout, run, serve, sim

# one module per command, in the order `seer --help` lists them: each defines
# add_parser(sub) (its subparser and flags) and run(args) -> int (the command)
COMMANDS = (run, rollout, actor, bench, serve, generate, profile, sim, keys)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(fn=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.fn(args)
    except KeyboardInterrupt:
        return 130
    except ValueError as exc:  # ConfigError and other user mistakes: one clear line
        print(f"seer: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
