"""Write a ``LlamaModel`` as a Hugging Face folder that ``transformers`` and SGLang load.

``save_hf_folder(model, folder, source=...)`` writes ``config.json`` (the architecture the
model has: ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` or ``Qwen3ForCausalLM``, labelled
with the dtype its weights hold, so SGLang's "auto" dtype serves what was trained),
``generation_config.json`` (the source folder's, else one with the EOS ids; the source's
``max_position_embeddings`` too, not the smaller context a run held it at),
``model.safetensors`` with HF names (``model.`` + ours; ``lm_head.weight`` as is, absent
when tied), and, when the model came from a folder (``source``), that folder's tokenizer
files, so ``AutoTokenizer.from_pretrained(folder)`` works on the export.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from actors.model.hf_config import to_hf_config
from actors.model.hf_folder import TOKENIZER_FILES, StrPath, read_folder
from actors.model.llama import LlamaModel
from actors.model.weights import _unshared_state


def save_hf_folder(
    model: LlamaModel,
    folder: StrPath,
    *,
    eos_token_id: int | list[int] | None = None,
    source: StrPath | None = None,
) -> None:
    """Write ``model`` as an HF folder (see the module docstring); ``eos_token_id`` defaults
    to the source folder's. ``load_hf_folder`` / ``read_weights`` read it back bit for bit."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    state = {_hf_name(k): v for k, v in _unshared_state(model).items()}
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    info = read_folder(source) if source else None
    if eos_token_id is None and info is not None and info.eos_token_ids:
        ids = list(info.eos_token_ids)
        eos_token_id = ids[0] if len(ids) == 1 else ids
    config: dict[str, Any] = {**to_hf_config(model.config), "torch_dtype": dtype}
    for key in ("bos_token_id", "pad_token_id"):
        if info is not None and info.hf.get(key) is not None:
            config[key] = info.hf[key]
    if info is not None and info.hf.get("max_position_embeddings"):
        # a run's max_context caps what it holds, not what the model can: keep the source's
        source_context = int(info.hf["max_position_embeddings"])
        config["max_position_embeddings"] = max(source_context, model.config.max_context)
    if eos_token_id is not None:
        config["eos_token_id"] = eos_token_id
    save_file(state, str(root / "model.safetensors"), metadata={"format": "pt"})
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    _write_generation_config(root, info.path if info else None, eos_token_id)
    if info is not None:
        copy_tokenizer_files(info.path, root)


def copy_tokenizer_files(source: StrPath, target: StrPath) -> list[str]:
    """Copy the tokenizer files ``source`` has into ``target``; the names copied."""
    copied: list[str] = []
    if Path(source).resolve() == Path(target).resolve():
        return copied
    for name in TOKENIZER_FILES:
        if (Path(source) / name).is_file():
            shutil.copyfile(Path(source) / name, Path(target) / name)
            copied.append(name)
    return copied


def _write_generation_config(root: Path, source: Path | None, eos: int | list[int] | None) -> None:
    path = source / "generation_config.json" if source else None
    generation: dict[str, Any] = {}
    if path is not None and path.is_file():
        generation = json.loads(path.read_text())
    if eos is not None:
        generation["eos_token_id"] = eos
    (root / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def _hf_name(name: str) -> str:
    return name if name.startswith("lm_head.") else f"model.{name}"
