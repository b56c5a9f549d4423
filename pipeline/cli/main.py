"""The `seer` command line: run the main job, start one actor, benchmarks, keys.

Global flags (before the command): `--version`, `--log-level` (also `SEER_LOG_LEVEL`, which
the actors a command starts inherit) and `--debug`. A mistake the user can make ends with
one line on stderr and exit code 2 (usage, a bad config, a missing file) or 1 (at run
time: an unreachable server, a lost actor); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from pipeline.cli import actor, bench, generate, keys, profile, rollout, run, serve, sim
from pipeline.logs import LEVEL_ENV, LEVELS, configure_logging, env_level

# one module per command, in the order `seer --help` lists them: each defines
# add_parser(sub) (its subparser and flags) and run(args) -> int (the command)
COMMANDS = (run, rollout, actor, bench, serve, generate, profile, sim, keys)

#: exit codes: a usage or config mistake, a failure at run time
USAGE_ERROR, RUNTIME_ERROR = 2, 1


def version() -> str:
    """The installed `seer-rl` distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("seer-rl")
    except PackageNotFoundError:
        return "unknown (not installed: run from a checkout)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"seer-rl {version()}")
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        help=f"structlog level of this command and the actors it starts (default: "
        f"${LEVEL_ENV}, else warning; `seer actor`: its topology's log_level)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (default: one line)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(fn=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.log_level:  # the actors this command starts inherit it
            os.environ[LEVEL_ENV] = args.log_level
        else:
            env_level()  # a bad SEER_LOG_LEVEL is a usage error here, not in every actor
        if args.command != "actor":  # an actor logs at its topology's level
            configure_logging("warning")
        code: int = args.fn(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every error a user can cause: one line and an exit code
        if args.debug:
            traceback.print_exception(exc)
        leaf, more = first_leaf(exc)
        code = exit_code(leaf)
        kind = "" if code == USAGE_ERROR else f"{type(leaf).__name__}: "
        extra = f" (and {more} more errors)" if more else ""
        hint = " (--debug: the traceback)" if code == RUNTIME_ERROR and not args.debug else ""
        print(f"seer: error: {kind}{leaf}{extra}{hint}", file=sys.stderr)
    return code


def first_leaf(exc: BaseException) -> tuple[BaseException, int]:
    """The first non-group exception inside `exc` (anyio's task groups wrap what an actor or
    a task raised) and how many others the group held."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc, 0
    leaves: list[BaseException] = []
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop(0)
        if isinstance(e, BaseExceptionGroup):
            stack[:0] = list(e.exceptions)
        else:
            leaves.append(e)
    return (leaves[0], len(leaves) - 1) if leaves else (exc, 0)


def exit_code(exc: BaseException) -> int:
    """2 for what the user can fix in the command or its files (a bad config or value, a
    missing file), 1 for a failure at run time (a server that does not answer, a lost
    actor, a bug)."""
    from actors.generator.errors import ServerError

    if isinstance(exc, ServerError):  # a ValueError, but the server's, not the user's
        return RUNTIME_ERROR
    usage = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError)
    return USAGE_ERROR if isinstance(exc, usage) else RUNTIME_ERROR


if __name__ == "__main__":
    sys.exit(main())
