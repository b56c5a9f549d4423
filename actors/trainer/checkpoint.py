"""Resumable trainer checkpoints: a folder written atomically, verified before it is used.

``save_checkpoint(trainer, path, iteration=i, extra={...})`` writes the folder ``path``:

    model.safetensors   the weights, via ``actors.model.save_model`` (config in its metadata)
    state.pt            optimiser state and RNG states: torch, numpy, python ``random`` and
                        the trainer's own generator (loaded with ``weights_only=True``)
    hf/                 the same weights as a Hugging Face folder of the model's architecture
                        (``config.json``, ``generation_config.json``, ``model.safetensors``,
                        and the source folder's tokenizer files when the model came from
                        one; ``actors.model.save_hf_folder``): what SGLang's
                        ``--model-path`` and ``/update_weights_from_disk`` load, and so
                        does ``seer serve --model``
    meta.json           format, iteration, trainer version, ``extra`` (JSON), and the sha256
                        of the model and state files; written last

The whole folder is first written under a temporary sibling name, then renamed into place (an
existing checkpoint at ``path`` is moved aside and removed only after the rename), so a crash
never leaves a half-written folder at ``path``.

``load_checkpoint(trainer, path)`` checks everything (presence, format, hashes, model shape)
before it touches the trainer, then restores weights, optimiser, version and RNG states, so
the next ``step`` continues the run exactly as if it had never stopped. It returns
``{"iteration": int, "version": int, "extra": dict}``. A missing, truncated or tampered
checkpoint raises ``CheckpointError`` naming the folder and the problem. The reference model
is not saved (it is fixed for the run, so the caller rebuilds it).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from actors.model import (
    load_model_config,
    load_state_dict,
    load_weights_into,
    save_hf_folder,
    save_model,
)
from actors.model.weights import HF_FOLDER, StrPath
from actors.trainer.core import GRPOTrainer

FORMAT = 1
_MODEL, _STATE, _META = "model.safetensors", "state.pt", "meta.json"
_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing, incomplete, corrupt or does not fit the trainer."""


def save_checkpoint(
    trainer: GRPOTrainer,
    path: StrPath,
    *,
    iteration: int,
    extra: Mapping[str, Any] = _NO_EXTRA,
    source: StrPath | None = None,
) -> None:
    """``source``: the Hugging Face folder the model came from (its tokenizer files and
    generation config go into ``hf/``); a seer file or None adds nothing."""
    source = source if source and Path(source).is_dir() else None
    target = Path(path)
    try:
        extra_json = json.loads(json.dumps(dict(extra)))
    except TypeError as exc:
        raise TypeError(f"checkpoint extra must be JSON-serialisable: {exc}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_model(trainer.model, tmp / _MODEL)
        torch.save(_state(trainer), tmp / _STATE)
        save_hf_folder(trainer.model, tmp / HF_FOLDER, source=source)
        meta = {
            "format": FORMAT,
            "iteration": iteration,
            "version": trainer.version,
            "extra": extra_json,
            "sha256": {name: _sha256(tmp / name) for name in (_MODEL, _STATE)},
        }
        (tmp / _META).write_text(json.dumps(meta, indent=1))
        for name in (_MODEL, _STATE, _META):
            _fsync(tmp / name)
        _swap_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_checkpoint(trainer: GRPOTrainer, path: StrPath) -> dict[str, Any]:
    folder = Path(path)
    meta = _read_meta(folder)
    for name, digest in meta["sha256"].items():
        if not (folder / name).is_file() or _sha256(folder / name) != digest:
            raise CheckpointError(f"checkpoint {folder}: {name} is missing or corrupt")
    try:
        config = load_model_config(folder / _MODEL)
        weights = load_state_dict(folder / _MODEL)
        state = torch.load(folder / _STATE, weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {folder} is unreadable: {exc}") from exc
    if config != trainer.model.config:
        raise CheckpointError(
            f"checkpoint {folder} holds a model {config}, the trainer has {trainer.model.config}"
        )
    try:  # validates the groups before it changes anything; the weights fit (same config)
        trainer.optimizer.load_state_dict(state["optimizer"])
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {folder}: optimiser state does not fit: {exc}") from exc
    load_weights_into(trainer.model, weights)
    trainer.version = int(meta["version"])
    _restore_rng(trainer, state)
    return {"iteration": int(meta["iteration"]), "version": trainer.version, "extra": meta["extra"]}


def _state(trainer: GRPOTrainer) -> dict[str, Any]:
    _, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "optimizer": trainer.optimizer.state_dict(),
        "rng_torch": torch.get_rng_state(),
        "rng_trainer": trainer.generator.get_state(),
        "rng_numpy": {
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "rng_python": random.getstate(),
    }


def _restore_rng(trainer: GRPOTrainer, state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["rng_torch"])
    trainer.generator.set_state(state["rng_trainer"])
    rng = state["rng_numpy"]
    keys = rng["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, rng["pos"], rng["has_gauss"], rng["gauss"]))
    version, internal, gauss = state["rng_python"]
    random.setstate((version, tuple(internal), gauss))


def _read_meta(folder: Path) -> dict[str, Any]:
    meta_path = folder / _META
    if not meta_path.is_file():
        raise CheckpointError(f"no checkpoint at {folder}: {_META} not found")
    try:
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, this code reads {FORMAT}")
        for key in ("iteration", "version", "extra", "sha256"):
            if key not in meta:
                raise ValueError(f"missing field {key!r}")
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise CheckpointError(f"checkpoint {folder}: bad {_META}: {exc}") from exc
    return meta


def _swap_into_place(tmp: Path, target: Path) -> None:
    if not target.exists():
        tmp.rename(target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())
