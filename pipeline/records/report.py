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
    """A table of ``rows`` under ``columns``, every column justified alike; no rows is an
    empty table captioned "no results" (unless ``caption`` says otherwise); a row whose
    length is not the columns' is a ``ValueError`` naming it."""
    rows = list(rows)
    table = Table(title=title, caption=caption if caption or rows else "no results")
    for column in columns:
        table.add_column(column, justify=justify)
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(
                f"{title}: row {i} has {len(row)} cells for {len(columns)} columns: {row!r}"
            )
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
