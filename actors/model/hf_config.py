"""Hugging Face ``config.json`` <-> ``ModelConfig``: what loads, and what is refused by name.

``hf_config(hf)`` maps a Llama (``LlamaForCausalLM``, Llama 3.x ``rope_scaling`` of type
"llama3" included), Qwen2 (``Qwen2ForCausalLM``: q/k/v bias) or Qwen3 (``Qwen3ForCausalLM``:
q/k RMSNorm, explicit ``head_dim``) config onto ``ModelConfig``. Every field of those
architectures in ``transformers`` that changes the maths is either honoured or refused with
a ``ModelFolderError`` naming it (another rope scaling type, a sliding window in use,
``mlp_bias``, an activation other than SiLU, partial rotary, tensor-parallel pretraining
slices); none is ignored. ``to_hf_config(cfg)`` is the inverse, with the architecture name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors.model.config import ModelConfig

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


class ModelFolderError(ValueError):
    """A model folder or its ``config.json`` cannot be used; the message names the file or
    field and why."""


def hf_config(
    hf: Mapping[str, Any], max_context: int | None = None, *, source: str = "config.json"
) -> ModelConfig:
    """Map a HF Llama/Qwen2/Qwen3 ``config.json`` onto ``ModelConfig``; ``max_context`` (if
    given) replaces ``max_position_embeddings`` as the longest sequence the model holds."""
    model_type = _model_type(hf, source)
    _refuse_unsupported(hf, model_type, source)
    heads = int(hf["num_attention_heads"])
    hidden = int(hf["hidden_size"])
    head_dim = hf.get("head_dim")
    bias = bool(hf.get("attention_bias", False))
    rope = _rope(hf, source)
    try:
        return ModelConfig(
            vocab_size=int(hf["vocab_size"]),
            hidden=hidden,
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            intermediate=int(hf["intermediate_size"]),
            max_context=int(max_context or hf.get("max_position_embeddings", 2048)),
            norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=True if model_type == "qwen2" else bias,
            output_bias=bias if model_type != "qwen2" else False,
            model_type=model_type,
            explicit_head_dim=(
                int(head_dim) if head_dim is not None and int(head_dim) != hidden // heads else None
            ),
            qk_norm=model_type == "qwen3",
            **rope,
        )
    except KeyError as exc:
        raise ModelFolderError(f"{source}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ModelFolderError(f"{source}: {exc}") from None


def _model_type(hf: Mapping[str, Any], source: str) -> str:
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type is None:
        by_arch = {v: k for k, v in ARCHITECTURES.items()}
        known = [by_arch[a] for a in archs if a in by_arch]
        if not known:
            raise ModelFolderError(f"{source}: no model_type, and architectures {archs} unknown")
        model_type = known[0]
    if model_type not in ARCHITECTURES:
        raise ModelFolderError(
            f"{source}: unsupported model_type {model_type!r}; supported: {sorted(ARCHITECTURES)}"
        )
    for arch in archs:
        if arch != ARCHITECTURES[model_type]:
            raise ModelFolderError(
                f"{source}: unsupported architecture {arch!r} for model_type {model_type!r} "
                f"(only {ARCHITECTURES[model_type]} loads)"
            )
    return str(model_type)


def _refuse_unsupported(hf: Mapping[str, Any], model_type: str, source: str) -> None:
    def refuse(field: str, why: str) -> None:
        raise ModelFolderError(f"{source}: {field} = {hf.get(field)!r} is not supported ({why})")

    if hf.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "only silu (SwiGLU) is implemented")
    if hf.get("mlp_bias"):
        refuse("mlp_bias", "MLP projections have no bias here")
    if int(hf.get("pretraining_tp") or 1) != 1:
        refuse("pretraining_tp", "only 1 is implemented")
    if model_type != "llama" and hf.get("use_sliding_window"):
        refuse("use_sliding_window", "sliding-window attention is not implemented")
    if "sliding_attention" in (hf.get("layer_types") or ()):
        refuse("layer_types", "sliding-window attention layers are not implemented")
    if model_type == "llama" and hf.get("sliding_window"):
        refuse("sliding_window", "sliding-window attention is not implemented")
    if model_type == "qwen2" and hf.get("attention_bias") is False:
        refuse("attention_bias", "Qwen2 always has q/k/v biases")


def _rope(hf: Mapping[str, Any], source: str) -> dict[str, Any]:
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    field = "rope_parameters" if hf.get("rope_parameters") else "rope_scaling"
    if not isinstance(params, Mapping):
        raise ModelFolderError(f"{source}: {field} must be an object, got {params!r}")
    if "sliding_attention" in params or "full_attention" in params:
        raise ModelFolderError(f"{source}: per-layer-type {field} is not supported")
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    partial = float(params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)))
    if partial != 1.0:
        raise ModelFolderError(f"{source}: partial_rotary_factor = {partial} is not supported")
    if rope_type == "default":
        return {"rope_theta": theta}
    if rope_type != "llama3":
        raise ModelFolderError(
            f"{source}: {field} of rope_type {rope_type!r} is not supported "
            "(only the default rotary and 'llama3' are implemented)"
        )
    missing = [k for k in _LLAMA3_KEYS if k not in params]
    if missing:
        raise ModelFolderError(f"{source}: {field} of rope_type 'llama3' lacks {missing}")
    return {
        "rope_theta": theta,
        "rope_type": "llama3",
        "rope_factor": float(params["factor"]),
        "rope_low_freq_factor": float(params["low_freq_factor"]),
        "rope_high_freq_factor": float(params["high_freq_factor"]),
        "rope_original_context": int(params["original_max_position_embeddings"]),
    }


def to_hf_config(cfg: ModelConfig) -> dict[str, Any]:
    """The HF ``config.json`` fields of ``cfg`` (``architectures`` included): the inverse
    of ``hf_config``."""
    rope: dict[str, Any] = {"rope_type": cfg.rope_type, "rope_theta": cfg.rope_theta}
    if cfg.rope_type == "llama3":
        rope |= {
            "factor": cfg.rope_factor,
            "low_freq_factor": cfg.rope_low_freq_factor,
            "high_freq_factor": cfg.rope_high_freq_factor,
            "original_max_position_embeddings": cfg.rope_original_context,
        }
    model_type = cfg.model_type
    if model_type == "llama" and cfg.attention_bias and not cfg.output_bias:
        model_type = "qwen2"  # q/k/v bias without an output bias: Qwen2's maths, not Llama's
    if model_type == "qwen2":
        is_consistent = cfg.attention_bias and not cfg.output_bias
    else:
        is_consistent = cfg.attention_bias == cfg.output_bias
    if not is_consistent or cfg.qk_norm != (model_type == "qwen3"):
        raise ValueError(
            f"ModelConfig {cfg} has no Hugging Face {ARCHITECTURES[model_type]} form "
            "(biases or q/k norm do not match the architecture)"
        )
    hf: dict[str, Any] = {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate,
        "max_position_embeddings": cfg.max_context,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": rope if cfg.rope_type != "default" else None,
        "rope_parameters": rope,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "hidden_act": "silu",
    }
    if model_type != "qwen2":
        hf["attention_bias"] = cfg.attention_bias
    if model_type != "llama":
        hf["use_sliding_window"] = False
    return hf
