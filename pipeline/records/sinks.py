"""Where a run's figures go besides ``metrics.jsonl``: experiment trackers ("sinks").

A sink takes scalars by step and tables of text by step, and writes them where its tool
reads them. Two are built in, both writing into the run folder and neither needing a
network:

- ``tensorboard``: event files under ``<run>/tensorboard/`` (``tensorboard --logdir``);
- ``wandb``: a Weights & Biases run under ``<run>/wandb/``, offline unless ``WANDB_MODE``
  says otherwise (``wandb sync <run>/wandb/offline-run-*`` uploads it later).

Both are optional extras, imported only when chosen; a chosen sink that is not installed
is a `SinkUnavailableError` naming the extra. Another tracker is one class with the three
methods of `Sink`, added to `SINKS`.

`Tracker` fans a run's rows out to its sinks. A row is one line of ``metrics.jsonl``: its
numbers become scalars tagged ``<group>/<key>`` (`scalar_tags`: the key unchanged, so a
quantity has one name in the file and in the tracker), at step = iterations done. Sample
completions go to every sink as a table and to ``<run>/samples.jsonl``.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from actors.options import ConfigError
from pipeline.records.metrics import ROLLOUT_FIGURES

__all__ = [
    "SINKS",
    "Sink",
    "SinkUnavailableError",
    "TensorBoardSink",
    "Tracker",
    "WandbSink",
    "check_sinks",
    "open_tracker",
    "scalar_tags",
]

#: (exact keys, group) then (key prefix, group): the first match names a scalar's group
_KEY_GROUPS = (
    ({"reward_mean", "success_rate", "num_reward_errors", "num_error_samples"}, "reward"),
    ({"rollout_s", *ROLLOUT_FIGURES}, "rollout"),
    ({"train_s"}, "train"),
)
_PREFIX_GROUPS = (("train_", "train"), ("eval_", "eval"), ("curriculum_", "curriculum"))


class Sink(Protocol):
    """A tracker the run's figures go to (one per name in ``RunConfig.report_to``)."""

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def log_table(
        self, step: int, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None: ...

    def close(self) -> None: ...


class SinkUnavailableError(ConfigError):
    """A sink was chosen whose package is not installed (the message names the extra)."""


def scalar_tags(row: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics row as ``group/key`` scalars: nested tables and lists of
    numbers flatten to ``group/key/sub``; strings, booleans, None, NaN and the row's
    ``iteration`` (the step) are left out, and so are ``eval_*_before``: the held-out score
    before RL, which the loop logs at its own step."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key != "iteration" and not (key.startswith("eval_") and key.endswith("_before")):
            _flatten(f"{_group(key)}/{key}", value, out)
    return out


def _group(key: str) -> str:
    for keys, group in _KEY_GROUPS:
        if key in keys:
            return group
    for prefix, group in _PREFIX_GROUPS:
        if key.startswith(prefix):
            return group
    return "run"


def _flatten(tag: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{tag}/{k}", v, out)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _flatten(f"{tag}/{i}", v, out)
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        out[tag] = float(value)


class TensorBoardSink:
    """Event files under ``<folder>/tensorboard/`` (torch's ``SummaryWriter``); tables are
    logged as markdown text, the config as text at step 0."""

    def __init__(self, folder: Path, config: Mapping[str, Any], run_name: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(folder / "tensorboard"))
        self.writer.add_text("config", _indented(json.dumps(config, indent=2, default=str)), 0)

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def log_table(
        self, step: int, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        self.writer.add_text(name, markdown_table(columns, rows), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A Weights & Biases run under ``<folder>/wandb/``: offline unless ``WANDB_MODE`` is
    set (the project: ``WANDB_PROJECT``, else "seer-rl"); the run's
    config is its wandb config, tables are ``wandb.Table``s."""

    def __init__(self, folder: Path, config: Mapping[str, Any], run_name: str) -> None:
        import os

        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            dir=str(folder),
            project=os.environ.get("WANDB_PROJECT") or "seer-rl",
            name=run_name,
            config=dict(config),
            mode=os.environ.get("WANDB_MODE") or "offline",  # type: ignore[arg-type]
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def log_table(
        self, step: int, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        table = self.wandb.Table(columns=list(columns), data=[list(r) for r in rows])
        self.run.log({name: table}, step=step)

    def close(self) -> None:
        """Finish the run; with no other wandb run open in this process, wait for wandb's
        service to write everything out (its run file is complete when this returns)."""
        self.run.finish()
        if self.wandb.run is None:
            self.wandb.teardown()


SinkFactory = Callable[[Path, Mapping[str, Any], str], Sink]

#: sink name -> (the module it needs, the extra that installs it, its factory)
SINKS: dict[str, tuple[str, str, SinkFactory]] = {
    "tensorboard": ("tensorboard", "tensorboard", TensorBoardSink),
    "wandb": ("wandb", "wandb", WandbSink),
}


def check_sinks(names: Sequence[str], field: str = "RunConfig.report_to") -> None:
    """`ConfigError` for an unknown sink name, `SinkUnavailableError` for one whose package
    is missing: before a run spends minutes on its warm start."""
    for name in names:
        if name not in SINKS:
            raise ConfigError(f"{field}: unknown sink {name!r}; choose from {sorted(SINKS)}")
        module, extra, _ = SINKS[name]
        if importlib.util.find_spec(module) is None:
            raise SinkUnavailableError(
                f"{field}: sink {name!r} needs the {module} package, not installed: "
                f"pip install 'seer-rl[{extra}]'"
            )


class Tracker:
    """A run's sinks, fed rows of ``metrics.jsonl`` and tables of samples (a context
    manager that closes every sink)."""

    def __init__(self, folder: Path, sinks: Sequence[Sink]) -> None:
        self.folder = folder
        self.sinks = tuple(sinks)

    def log_row(self, row: Mapping[str, Any], step: int | None = None) -> None:
        """A metrics row's numbers, at ``step`` (default: ``row["iteration"] + 1``, the
        iterations done)."""
        if not self.sinks:
            return
        scalars = scalar_tags(row)
        at = int(row["iteration"]) + 1 if step is None else step
        for sink in self.sinks:
            sink.log_scalars(at, scalars)

    def log_table(
        self, step: int, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """A table to every sink, and its rows to ``<folder>/<name>.jsonl`` (one object a
        row, with the step); a table without rows is not logged."""
        if not rows:
            return
        with (self.folder / f"{name}.jsonl").open("a") as f:
            for r in rows:
                f.write(json.dumps({"step": step, **dict(zip(columns, r, strict=True))}) + "\n")
        for sink in self.sinks:
            sink.log_table(step, name, columns, rows)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tracker(
    names: Sequence[str], folder: str | Path, config: Mapping[str, Any], run_name: str = ""
) -> Tracker:
    """A `Tracker` over the sinks ``names`` (checked by `check_sinks`), writing into
    ``folder``; ``config`` is shown by each sink (wandb's run config, TensorBoard text)."""
    check_sinks(names)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    sinks: list[Sink] = []
    try:
        for name in dict.fromkeys(names):  # once each, in order
            sinks.append(SINKS[name][2](out, config, run_name or out.name))
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return Tracker(out, sinks)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table (what TensorBoard's text tab renders); cells' ``|`` and newlines
    are escaped."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _indented(text: str) -> str:
    """Text as a markdown code block (4 spaces), so TensorBoard keeps its layout."""
    return "\n".join("    " + line for line in text.splitlines())
