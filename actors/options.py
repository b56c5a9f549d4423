"""What every actor's options share: `ConfigError` and the checks `__post_init__` runs.

Options are frozen dataclasses validated once, in `__post_init__`, so a bad value is a
`ConfigError` naming the key in the process that builds the topology, before any actor is
launched (the launcher builds every actor's options to check them).
"""

from __future__ import annotations

from collections.abc import Collection


class ConfigError(ValueError):
    """A configuration value or file is wrong; the message says where and why."""


def check(ok: bool, key: str, rule: str, value: object) -> None:
    """Raise `ConfigError` "`key` must be `rule`, got `value`" unless `ok`."""
    if not ok:
        raise ConfigError(f"{key} must be {rule}, got {value!r}")


def check_positive(options: object, *names: str) -> None:
    """Every named field of `options` is > 0."""
    for name in names:
        value = getattr(options, name)
        check(value > 0, f"{type(options).__name__}.{name}", "> 0", value)


def check_choice(options: object, name: str, choices: Collection[str]) -> None:
    value = getattr(options, name)
    check(value in choices, f"{type(options).__name__}.{name}", f"one of {sorted(choices)}", value)
