"""The tiny Llama-style model shared by the generator and the trainer, with what both sides
of a weight version agree on: the sampling transform (``sampling``) and the weights'
publication from the trainer to the generators (``publish``)."""

from actors.model.config import ModelConfig
from actors.model.layout import BatchLayout, build_layout, causal_mask
from actors.model.llama import LlamaModel
from actors.model.options import ModelOptions, build_model
from actors.model.tokenizer import ByteTokenizer
from actors.model.weights import (
    hf_config,
    load_hf_folder,
    load_model,
    load_model_config,
    load_state_dict,
    load_weights_into,
    read_weights,
    save_hf_folder,
    save_model,
    to_hf_config,
)

__all__ = [
    "BatchLayout",
    "ByteTokenizer",
    "LlamaModel",
    "ModelConfig",
    "ModelOptions",
    "build_layout",
    "build_model",
    "causal_mask",
    "hf_config",
    "load_hf_folder",
    "load_model",
    "load_model_config",
    "load_state_dict",
    "load_weights_into",
    "read_weights",
    "save_hf_folder",
    "save_model",
    "to_hf_config",
]
