"""A command's results: a table for the terminal and a JSON file.

Every `seer bench` and `seer sim` command ends alike: it prints its figures as a rich
table and writes them as JSON. ``results_table`` builds the table (a title, its columns,
its rows of already formatted cells, a caption); ``write_results`` writes the JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table

__all__ = ["results_table", "write_results"]


def results_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]] = (),
    *,
    caption: str | None = None,
    justify: JustifyMethod = "right",
) -> Table:
    """A table of ``rows`` under ``columns``, every column justified alike."""
    table = Table(title=title, caption=caption)
    for column in columns:
        table.add_column(column, justify=justify)
    for row in rows:
        table.add_row(*row)
    return table


def write_results(
    path: str | Path,
    data: Any,
    *,
    indent: int = 2,
    default: Callable[[Any], Any] | None = None,
) -> Path:
    """``data`` as JSON at ``path``, its folder made if missing (``default``: as
    ``json.dumps`` takes it); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=indent, default=default))
    return out
