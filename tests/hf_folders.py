"""Tiny Hugging Face model folders made with transformers' own classes, for any test.

``make_hf_folder(path, arch)`` writes a random ``arch`` model ("qwen2": tied embeddings,
q/k/v bias; "llama3": Llama with ``rope_scaling`` of type "llama3", untied, GQA; "qwen3":
q/k norm and ``head_dim`` != hidden / heads, tied) with ``save_pretrained`` and a small
byte-level BPE tokenizer trained with ``tokenizers``, wrapped in ``PreTrainedTokenizerFast``
with a chat template, in the same folder. Weights are scaled up so logits are far from
uniform (greedy comparisons then have no near-ties). Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB = 300
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "count down from ten to one and add the numbers",
    "what is two plus three? the answer is five",
    "hello world, this is a tiny tokenizer for tests",
    "0 1 2 3 4 5 6 7 8 9 + - * / = ( )",
]


def make_tokenizer(path: Path) -> Any:
    """A byte-level BPE of ``VOCAB`` ids (specials first) saved in ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return fast


def hf_model(arch: str, *, tie: bool | None = None, seed: int = 0, **overrides: Any) -> Any:
    """A random transformers model of ``arch`` (float32), weights scaled up."""
    import transformers

    common: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "eos_token_id": 2,
        "bos_token_id": None,
        "pad_token_id": 0,
    }
    if arch == "qwen2":
        cls, config_cls = transformers.Qwen2ForCausalLM, transformers.Qwen2Config
        fields = {"tie_word_embeddings": True if tie is None else tie}
    elif arch == "llama3":
        cls, config_cls = transformers.LlamaForCausalLM, transformers.LlamaConfig
        rope = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,  # small, so the medium band is hit
        }
        fields = {"tie_word_embeddings": bool(tie), "rope_parameters": rope}
    elif arch == "qwen3":
        cls, config_cls = transformers.Qwen3ForCausalLM, transformers.Qwen3Config
        fields = {"tie_word_embeddings": True if tie is None else tie, "head_dim": 32}
    else:
        raise ValueError(f"unknown arch {arch!r}")
    config = config_cls(**(common | fields | overrides))
    torch.manual_seed(seed)
    model = cls(config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(0.15 * torch.randn(param.shape, generator=gen))
    return model


def make_hf_folder(
    path: Path,
    arch: str = "qwen2",
    *,
    tie: bool | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    shard_size: str | None = None,
    tokenizer: bool = True,
    **overrides: Any,
) -> Path:
    """A model folder at ``path`` (see the module docstring); ``shard_size`` (e.g. "60KB")
    shards the weights with an index; ``overrides`` go to the transformers config."""
    model = hf_model(arch, tie=tie, seed=seed, **overrides).to(dtype)
    kwargs: dict[str, Any] = {"safe_serialization": True}
    if shard_size is not None:
        kwargs["max_shard_size"] = shard_size
    model.save_pretrained(str(path), **kwargs)
    if tokenizer:
        make_tokenizer(path)
    return path
