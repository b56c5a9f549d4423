"""Hugging Face ``generate`` on the engine benchmark's model, measured in the same run.

``seer bench engine`` sets the built-in engine beside ``transformers``' ``generate`` on the
same weights (copied into a ``LlamaForCausalLM``, or a ``Qwen2ForCausalLM`` for a model
with q/k/v biases; or the Hugging Face folder itself, ``from_folder``), prompts, batch
sizes, thread count and decoding (greedy, ``min_new_tokens`` so every row makes all its
tokens), so its ratio divides two numbers of one run. transformers is a dev dependency:
where it is not installed, ``version()`` is None and the benchmark reports no ratio.

Not here: the engine's side, printing, JSON.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import time
from typing import Any

import torch

from actors.model import LlamaModel, to_hf_config


def version() -> str | None:
    """The installed transformers version, or None when it cannot be imported."""
    if importlib.util.find_spec("transformers") is None:
        return None
    return importlib.metadata.version("transformers")


def hf_twin(model: LlamaModel) -> Any:
    """A ``LlamaForCausalLM`` of ``model``'s shape holding ``model``'s weights; a
    ``Qwen2ForCausalLM`` when it has q/k/v biases (Llama's ``attention_bias`` would add one
    to the output projection too)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    # generate's notes on its flags would drown the tables (what set_verbosity_error does)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    fields = to_hf_config(model.config)
    hf: Any
    if model.config.attention_bias:
        hf = Qwen2ForCausalLM(Qwen2Config(**{**fields, "model_type": "qwen2"}))
    else:
        hf = LlamaForCausalLM(LlamaConfig(**fields))
    hf.to(next(model.parameters()).dtype)
    state = {
        name if name == "lm_head.weight" else f"model.{name}": tensor
        for name, tensor in model.state_dict().items()
    }
    hf.load_state_dict(state, strict=True)
    return hf.eval()


def from_folder(folder: str) -> Any:
    """The Hugging Face model of a checkpoint folder, in float32."""
    from transformers import AutoModelForCausalLM

    logging.getLogger("transformers").setLevel(logging.ERROR)
    hf: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return hf.eval()


def generate_greedy(
    hf: Any, prompts: list[tuple[int, ...]], new_tokens: int
) -> tuple[float, list[list[int]]]:
    """Tokens per second of one greedy ``generate`` call over all ``prompts`` (equal
    lengths: no padding), wall time of the whole call, and each row's new tokens."""
    ids = torch.tensor(prompts, dtype=torch.long)  # (B, P)
    with torch.inference_mode():
        start = time.perf_counter()
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            min_new_tokens=new_tokens,
            max_new_tokens=new_tokens,
            pad_token_id=0,
        )
        seconds = time.perf_counter() - start
    generated = out.shape[1] - ids.shape[1]
    if generated != new_tokens:
        raise RuntimeError(f"generate made {generated} tokens per row, expected {new_tokens}")
    return float(ids.shape[0] * generated / seconds), out[:, ids.shape[1] :].tolist()
