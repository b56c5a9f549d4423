"""Where the weights named by a path are: a file, an HF folder, or a checkpoint's ``hf/``."""

from __future__ import annotations

from pathlib import Path

from actors.model.weights import HF_FOLDER


def weights_path(path: str) -> Path:
    """``path``, or the HF folder inside it when it is a trainer checkpoint folder."""
    root = Path(path)
    inner = root / HF_FOLDER
    if root.is_dir() and not (root / "config.json").exists() and (inner / "config.json").exists():
        return inner
    return root
