"""What a model folder must not do silently: every field that changes the maths and is not
implemented is refused by name, and a broken folder is a typed error naming the file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from actors.model import (
    ModelConfig,
    ModelFolderError,
    ModelOptions,
    TokenizerMissingError,
    build_model,
    load_hf_folder,
    load_model,
    load_tokenizer,
    read_folder,
)
from actors.model.weights import _CONFIG_KEY
from actors.options import ConfigError
from tests.hf_folders import make_hf_folder

pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf")
    return make_hf_folder(root / "qwen2", "qwen2", tokenizer=False)


def _variant(base: Path, tmp: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A folder sharing ``base``'s weights with an edited config.json."""
    tmp.mkdir(parents=True, exist_ok=True)
    os.symlink(base / "model.safetensors", tmp / "model.safetensors")
    config = json.loads((base / "config.json").read_text())
    edit(config)
    (tmp / "config.json").write_text(json.dumps(config))
    return tmp


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda config: config.update(fields)


YARN = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}
REFUSED = {
    "yarn": (_set(rope_parameters=YARN), "rope_type 'yarn'"),
    "yarn_legacy": (_set(rope_parameters=None, rope_scaling=YARN), "rope_scaling of rope_type"),
    "linear": (_set(rope_parameters={"rope_type": "linear", "factor": 2.0}), "'linear'"),
    "sliding": (_set(use_sliding_window=True), "use_sliding_window"),
    "sliding_layers": (_set(layer_types=["full_attention", "sliding_attention"]), "layer_types"),
    "model_type": (_set(model_type="mistral"), "model_type 'mistral'"),
    "architecture": (_set(architectures=["Qwen2ForSequenceClassification"]), "architecture"),
    "act": (_set(hidden_act="gelu"), "hidden_act"),
    "mlp_bias": (_set(mlp_bias=True), "mlp_bias"),
    "partial": (_set(partial_rotary_factor=0.5), "partial_rotary_factor"),
    "dtype": (_set(dtype="float8_e4m3fn"), "torch_dtype"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsupported_fields_are_refused_by_name(base: Path, tmp_path: Path, case: str) -> None:
    edit, named = REFUSED[case]
    folder = _variant(base, tmp_path / case, edit)
    with pytest.raises(ModelFolderError, match=named) as info:
        load_hf_folder(folder)
    assert "config.json" in str(info.value)


def test_the_unedited_variant_loads(base: Path, tmp_path: Path) -> None:
    """The refusals above are the edits', not the copy's."""
    assert load_hf_folder(_variant(base, tmp_path / "same", _set())).config.model_type == "qwen2"


def test_broken_folders_are_typed_errors_naming_the_file(base: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelFolderError, match=r"config\.json not found"):
        load_hf_folder(tmp_path)
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((base / "config.json").read_text())
    with pytest.raises(ModelFolderError, match=r"no \*\.safetensors"):
        load_hf_folder(no_weights)
    missing = tmp_path / "missing"
    missing.mkdir()
    (missing / "config.json").write_text((base / "config.json").read_text())
    state = load_file(str(base / "model.safetensors"))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(missing / "model.safetensors"))
    with pytest.raises(ModelFolderError, match=r"layers\.1\.mlp\.up_proj\.weight"):
        load_hf_folder(missing)
    with pytest.raises(TokenizerMissingError, match="no tokenizer"):
        load_tokenizer(base)


def test_a_shard_the_index_names_must_exist(tmp_path: Path) -> None:
    folder = make_hf_folder(tmp_path / "sharded", "qwen2", shard_size="40KB", tokenizer=False)
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(ModelFolderError, match=shard.name):
        read_folder(folder)


def test_device_and_dtype_options(base: Path) -> None:
    with pytest.raises(ConfigError, match="device"):
        ModelOptions(device="gpu")
    with pytest.raises(ConfigError, match="dtype"):
        ModelOptions(dtype="float8")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            build_model(ModelOptions(path=str(base), device="cuda:0"))
    half = build_model(ModelOptions(path=str(base), dtype="float16"))
    assert next(half.parameters()).dtype == torch.float16
    assert build_model(ModelOptions(path=str(base), max_context=64)).config.max_context == 64


def test_an_old_seer_file_without_the_new_fields_loads(tmp_path: Path) -> None:
    old = {
        "vocab_size": 40, "hidden": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2,
        "intermediate": 64, "max_context": 64, "rope_theta": 10000.0, "norm_eps": 1e-5,
        "tie_embeddings": False, "attention_bias": False,
    }  # fmt: skip
    model = build_model(ModelOptions(**{k: old[k] for k in list(old)[:7]}))
    path = tmp_path / "old.safetensors"
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        str(path),
        metadata={_CONFIG_KEY: json.dumps(old)},
    )
    loaded = load_model(path)
    assert loaded.config == ModelConfig(**old) and loaded.config.model_type == "llama"
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))
