"""Sub-commands whose flags live in the module that runs them, imported only when chosen.

`seer bench NAME` and `seer sim NAME` list one sub-command per module: each module declares
its own flags in `add_arguments(parser)` next to its code and runs from the parsed flags in
`run_args(args)`. The CLI lists names, modules and one-line helps; the module is imported
when its name is parsed (a bench may import torch: `seer --help` must not), so
`seer bench NAME --help` shows that bench's flags only, and a flag another bench takes is an
error, not silently ignored. Adding a bench is a line here and two functions beside its code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """A sub-command: the module that declares its flags and runs it, and a one-line help."""

    module: str
    help: str


class LazySubParsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subparsers that add a command's flags (its module's `add_arguments`) when parsed."""

    commands: Mapping[str, Command] = {}
    common: Callable[[argparse.ArgumentParser], None] = staticmethod(lambda parser: None)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name = values[0] if values else ""
        chosen = self._name_parser_map.get(name) if name in self.commands else None
        if chosen is not None and not getattr(chosen, "_seer_loaded", False):
            module = importlib.import_module(self.commands[name].module)
            self.common(chosen)
            module.add_arguments(chosen)
            chosen.set_defaults(run_args=module.run_args)
            chosen._seer_loaded = True
        super().__call__(parser, namespace, values, option_string)


def add_commands(
    parser: argparse.ArgumentParser,
    dest: str,
    commands: Mapping[str, Command],
    common: Callable[[argparse.ArgumentParser], None] = lambda parser: None,
) -> None:
    """One sub-command of `parser` per entry of `commands`; `common` adds the flags every
    one of them takes (before the module's own)."""
    action = type(
        "Lazy" + dest.title(),
        (LazySubParsers,),
        {"commands": commands, "common": staticmethod(common)},
    )
    sub = parser.add_subparsers(dest=dest, required=True, metavar="NAME", action=action)
    for name, command in commands.items():
        sub.add_parser(name, help=command.help, description=command.help)


def run_chosen(args: argparse.Namespace) -> int:
    """Run the chosen sub-command from its parsed flags."""
    args.run_args(args)
    return 0
