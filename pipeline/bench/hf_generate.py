"""Hugging Face ``generate`` on the engine benchmark's model, measured in the same run.

``seer bench engine`` sets the built-in engine beside ``transformers``' ``generate`` on the
same weights (copied into a ``LlamaForCausalLM``), prompts, batch sizes, thread count and
sampling (temperature 1, no top-k / top-p, ``min_new_tokens`` so every row makes all its
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
    """A ``LlamaForCausalLM`` of ``model``'s shape holding ``model``'s weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    # generate's notes on its flags would drown the tables (what set_verbosity_error does)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    hf: Any = LlamaForCausalLM(LlamaConfig(**to_hf_config(model.config)))
    hf.to(next(model.parameters()).dtype)
    state = {
        name if name == "lm_head.weight" else f"model.{name}": tensor
        for name, tensor in model.state_dict().items()
    }
    hf.load_state_dict(state, strict=True)
    return hf.eval()


def generate_tokens_per_s(
    hf: Any, prompts: list[tuple[int, ...]], new_tokens: int, seed: int = 0
) -> float:
    """Sampled tokens per second of one ``generate`` call over all ``prompts`` (equal
    lengths: no padding), wall time of the whole call."""
    ids = torch.tensor(prompts, dtype=torch.long)  # (B, P)
    torch.manual_seed(seed)
    with torch.inference_mode():
        start = time.perf_counter()
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            min_new_tokens=new_tokens,
            max_new_tokens=new_tokens,
            pad_token_id=0,
        )
        seconds = time.perf_counter() - start
    generated = out.shape[1] - ids.shape[1]
    if generated != new_tokens:
        raise RuntimeError(f"generate made {generated} tokens per row, expected {new_tokens}")
    return float(ids.shape[0] * generated / seconds)
