"""A `seer run` folder: its resolved config, its checkpoints, and resuming from them.

The folder holds `config.toml` (the run's `RunConfig`, every field resolved: what
`seer run --resume FOLDER` continues from), `metrics.jsonl`, the actors' `logs/`,
`last-rollout/` and the checkpoints: `checkpoint/` is the latest; with
`keep_checkpoints` K > 1 the K - 1 before it stay as `checkpoint-<iteration>/`.
Plain file operations: no actor takes part.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

from pipeline.config import ConfigError, build_options, config_to_toml
from pipeline.rl.config import RunConfig

CONFIG_FILE = "config.toml"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT = "checkpoint"
_META = "meta.json"  # the trainer's checkpoint metadata (actors/trainer/checkpoint.py)


def config_toml(cfg: RunConfig) -> str:
    """`cfg` as TOML that `load_run_config` reads back to an equal config."""
    return config_to_toml(cfg)


def save_run_config(cfg: RunConfig, folder: Path) -> Path:
    """Write `cfg` to `folder/config.toml`; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CONFIG_FILE
    path.write_text(config_toml(cfg))
    return path


def load_run_config(path: str | Path) -> RunConfig:
    """A `RunConfig` from a TOML file (keys left out keep the defaults); `ConfigError`
    names the file and the key."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (FileNotFoundError, IsADirectoryError):
        raise ConfigError(f"config file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    cfg: RunConfig = build_options(RunConfig, data, str(p))
    return cfg


def checkpoint_iteration(folder: Path) -> int | None:
    """The iteration a checkpoint folder was saved at (None: not a readable checkpoint)."""
    try:
        return int(json.loads((folder / _META).read_text())["iteration"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def checkpoints(run_folder: Path) -> list[tuple[int, Path]]:
    """(iteration, folder) of the run's checkpoints, oldest first."""
    found = []
    for path in [run_folder / CHECKPOINT, *run_folder.glob(f"{CHECKPOINT}-*")]:
        it = checkpoint_iteration(path) if path.is_dir() else None
        if it is not None:
            found.append((it, path))
    return sorted(found)


def latest_checkpoint(run_folder: Path) -> Path | None:
    """The run's checkpoint of the highest iteration (None: it has none)."""
    found = checkpoints(run_folder)
    return found[-1][1] if found else None


def make_room(run_folder: Path, keep: int) -> None:
    """Before a checkpoint is saved to `checkpoint/`: with `keep` > 1, move the one there to
    `checkpoint-<iteration>/`; then delete the oldest of those beyond `keep` - 1."""
    if keep < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep}")
    latest = run_folder / CHECKPOINT
    it = checkpoint_iteration(latest)
    if keep > 1 and it is not None:
        latest.rename(run_folder / f"{CHECKPOINT}-{it:06d}")
    older = [path for _, path in checkpoints(run_folder) if path.name != CHECKPOINT]
    for path in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(path)


def resume_from(folder: str | Path) -> tuple[RunConfig, Path]:
    """`seer run --resume RUN_FOLDER`: the folder's saved config and its latest checkpoint
    (`ConfigError` naming the folder if it has no config or no checkpoint)."""
    run_folder = Path(folder)
    if not (run_folder / CONFIG_FILE).is_file():
        raise ConfigError(
            f"--resume {run_folder}: not a run folder (no {CONFIG_FILE}; a run writes it when "
            "it starts)"
        )
    cfg = load_run_config(run_folder / CONFIG_FILE)
    checkpoint = latest_checkpoint(run_folder)
    if checkpoint is None:
        raise ConfigError(
            f"--resume {run_folder}: no checkpoint in it (one is saved every "
            f"checkpoint_every = {cfg.checkpoint_every} iterations)"
        )
    return cfg, checkpoint


def keep_rows_before(run_folder: Path, first: int) -> None:
    """A resumed run's `metrics.jsonl` without the rows of iterations it runs again."""
    path = run_folder / METRICS_FILE
    if not path.exists():
        return
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for line in lines if json.loads(line).get("iteration", -1) < first]
    path.write_text("".join(line + "\n" for line in kept))
