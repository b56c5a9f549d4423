"""What a text task reads from a Hugging Face model folder: the tokenizer, the vocabulary
size and the tokens that end a sample.

- ``tokenizer_from(folder)``: the model loader's ``load_tokenizer`` (``transformers``'
  ``AutoTokenizer``, local files only, imported lazily: the ``hf`` extra); a missing folder
  or tokenizer is a `TaskError` naming the folder.
- ``folder_vocab_size``: ``config.json``'s ``vocab_size`` (the model's embedding rows, which
  may exceed the tokenizer's length), else the tokenizer's length.
- ``folder_stop_ids``: the EOS a sample ends with and every stop token. The engine takes one
  ``eos_token_id`` plus a request's ``stop_token_ids``: the EOS is the tokenizer's
  ``eos_token_id`` (for an instruct model the end-of-turn token, e.g. Qwen's ``<|im_end|>``),
  else the first of ``generation_config.json``'s ``eos_token_id`` (an int or a list); the stop
  tokens are both, deduplicated, EOS first.
- ``model_folder(model_dir)``: the convention for task factories: the run passes its model
  folder as ``model_dir=``; without one, the ``SEER_MODEL`` environment variable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from actors.model.hf_config import ModelFolderError
from actors.model.hf_tokenizer import load_tokenizer
from pipeline.tasks.base import TaskError

HF_EXTRA = "pip install 'seer-rl[hf]'"


def tokenizer_from(folder: str | Path) -> Any:
    """The fast tokenizer of the model folder `folder`, from local files only (the model
    loader's `load_tokenizer`; its errors become `TaskError`s naming the folder)."""
    path = Path(folder)
    if not path.is_dir():
        raise TaskError(f"model folder {str(path)!r} does not exist (looking for its tokenizer)")
    try:
        return load_tokenizer(path)
    except ImportError as exc:
        raise TaskError(f"a text task needs transformers: {HF_EXTRA} ({exc})") from exc
    except ModelFolderError as exc:
        raise TaskError(f"model folder {str(path)!r}: no tokenizer could be loaded: {exc}") from exc


def tokenizer_folder(tokenizer: Any) -> Path | None:
    """The folder a loaded tokenizer came from, when it is a local folder."""
    name = getattr(tokenizer, "name_or_path", "")
    return Path(name) if name and Path(name).is_dir() else None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, {} when absent; `TaskError` naming the file when malformed."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TaskError(f"{path}: not readable JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise TaskError(f"{path}: expected a JSON object")
    return data


def folder_vocab_size(folder: Path | None, tokenizer: Any) -> int:
    """The model's vocabulary: `config.json`'s `vocab_size`, else the tokenizer's length."""
    if folder is not None:
        config = read_json(folder / "config.json")
        vocab = config.get("vocab_size", config.get("text_config", {}).get("vocab_size"))
        if vocab is not None:
            if not isinstance(vocab, int) or vocab < 1:
                raise TaskError(f"{folder / 'config.json'}: vocab_size {vocab!r} is not a count")
            return vocab
    return len(tokenizer)


def folder_stop_ids(folder: Path | None, tokenizer: Any) -> tuple[int, ...]:
    """(EOS, other stop tokens...): see the module docstring; `TaskError` when there is none."""
    ids: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.append(eos)
    if folder is not None:
        generation = read_json(folder / "generation_config.json").get("eos_token_id")
        listed = generation if isinstance(generation, list) else [generation]
        ids += [int(t) for t in listed if isinstance(t, int)]
    if not ids:
        where = f"model folder {str(folder)!r}" if folder else "the tokenizer"
        raise TaskError(
            f"{where} names no EOS token (tokenizer eos_token, generation_config.json "
            "eos_token_id): pass eos_token_id="
        )
    return tuple(dict.fromkeys(ids))


#: where a task factory finds the model folder when the run passes none
MODEL_ENV = "SEER_MODEL"


def model_folder(model_dir: str | None) -> str:
    """The model folder a task factory should read its tokenizer from: `model_dir` (what the
    run passes a factory that takes ``model_dir=``: its model folder), else the
    ``SEER_MODEL`` environment variable; `TaskError` when neither is set."""
    folder = model_dir or os.environ.get(MODEL_ENV, "")
    if not folder:
        raise TaskError(
            f"this task needs a model folder with a tokenizer: run with --model DIR (the run "
            f"passes it as model_dir=) or set {MODEL_ENV}=DIR"
        )
    return folder
