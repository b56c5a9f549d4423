"""The tokenizer of a Hugging Face model folder, through ``transformers.AutoTokenizer``.

``load_tokenizer(folder)`` loads the folder's fast tokenizer from local files only (nothing
is downloaded); a folder without tokenizer files is a ``TokenizerMissingError`` naming it,
and a missing ``transformers`` says which extra to install. ``transformers`` is imported
here lazily: the core package runs without it (the toy tasks use ``ByteTokenizer``).
"""

from __future__ import annotations

from typing import Any

from actors.model.hf_config import ModelFolderError
from actors.model.hf_folder import StrPath, has_tokenizer


class TokenizerMissingError(ModelFolderError):
    """The model folder has no tokenizer files (``tokenizer.json`` / ``tokenizer_config.json``)."""


def load_tokenizer(folder: StrPath) -> Any:
    """The folder's ``transformers`` fast tokenizer (a ``PreTrainedTokenizerFast``)."""
    if not has_tokenizer(folder):
        raise TokenizerMissingError(
            f"{folder}: no tokenizer (neither tokenizer.json nor tokenizer_config.json)"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - the hf extra is a dev dependency
        raise ImportError(
            "loading a model folder's tokenizer needs transformers: pip install 'seer-rl[hf]'"
        ) from exc
    try:
        return AutoTokenizer.from_pretrained(str(folder), use_fast=True, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelFolderError(f"{folder}: the tokenizer does not load: {exc}") from exc
