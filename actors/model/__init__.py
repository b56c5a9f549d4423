"""The Llama-style model shared by the generator and the trainer (Llama, Qwen2 and Qwen3
shapes), with what both sides of a weight version agree on: the sampling transform
(``sampling``), the weights' publication from the trainer to the generators (``publish``),
and Hugging Face folders both ways (``hf_folder``, ``hf_export``, ``hf_tokenizer``)."""

from actors.model.config import ModelConfig
from actors.model.hf_config import ModelFolderError, hf_config, to_hf_config
from actors.model.hf_export import copy_tokenizer_files, save_hf_folder
from actors.model.hf_folder import (
    FolderInfo,
    load_hf_folder,
    load_hf_state_dict,
    read_folder,
    read_weights,
)
from actors.model.hf_tokenizer import TokenizerMissingError, load_tokenizer
from actors.model.layout import BatchLayout, build_layout, causal_mask
from actors.model.llama import LlamaModel
from actors.model.options import ModelOptions, build_model, check_device, load_pretrained
from actors.model.tokenizer import ByteTokenizer
from actors.model.weights import (
    load_model,
    load_model_config,
    load_state_dict,
    load_weights_into,
    save_model,
)

__all__ = [
    "BatchLayout",
    "ByteTokenizer",
    "FolderInfo",
    "LlamaModel",
    "ModelConfig",
    "ModelFolderError",
    "ModelOptions",
    "TokenizerMissingError",
    "build_layout",
    "build_model",
    "causal_mask",
    "check_device",
    "copy_tokenizer_files",
    "hf_config",
    "load_hf_folder",
    "load_hf_state_dict",
    "load_model",
    "load_model_config",
    "load_pretrained",
    "load_state_dict",
    "load_tokenizer",
    "load_weights_into",
    "read_folder",
    "read_weights",
    "save_hf_folder",
    "save_model",
    "to_hf_config",
]
