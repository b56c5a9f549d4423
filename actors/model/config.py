"""ModelConfig: the shape of the Llama-style decoder shared by the generator and the trainer.

A frozen dataclass validated once in ``__post_init__``: every user mistake (a head count that
does not divide the width, a zero layer count, ...) is a ``ValueError`` with a clear message.
It maps one to one onto a Hugging Face Llama/Qwen2/Qwen3 ``config.json`` (see ``hf_config.py``);
files saved before a field existed load with its default (the toy's shape).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MODEL_TYPES = ("llama", "qwen2", "qwen3")
ROPE_TYPES = ("default", "llama3")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape of a Llama-style decoder (RMSNorm, rotary positions, SwiGLU, grouped-query attention).

    ``num_kv_heads`` < ``num_heads`` gives grouped-query attention; ``attention_bias`` adds
    biases to the q/k/v projections (Qwen2); ``tie_embeddings`` shares the input embedding
    with the output head. ``model_type`` names the Hugging Face architecture an export is
    labelled with ("llama", "qwen2", "qwen3"); ``explicit_head_dim`` sets the head width when
    it is not ``hidden / num_heads`` (Qwen3); ``qk_norm`` RMS-normalises q and k over the head
    before rotary (Qwen3); ``output_bias`` adds a bias to the output projection (Llama's and
    Qwen3's ``attention_bias``). ``rope_type`` "llama3" rescales the rotary inverse
    frequencies by wavelength with ``rope_factor``, ``rope_low_freq_factor``,
    ``rope_high_freq_factor`` and ``rope_original_context`` (Llama 3.x ``rope_scaling``).
    """

    vocab_size: int = 259
    hidden: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate: int = 688
    max_context: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False
    model_type: str = "llama"
    explicit_head_dim: int | None = None
    qk_norm: bool = False
    output_bias: bool = False
    rope_type: str = "default"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_context: int = 8192

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate",
            "max_context",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.model_type not in MODEL_TYPES:
            raise ValueError(
                f"ModelConfig.model_type must be one of {MODEL_TYPES}, got {self.model_type!r}"
            )
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(
                f"ModelConfig.rope_type must be one of {ROPE_TYPES}, got {self.rope_type!r}"
            )
        if self.rope_type == "llama3" and not (
            self.rope_factor > 0
            and self.rope_high_freq_factor > self.rope_low_freq_factor > 0
            and self.rope_original_context > 0
        ):
            raise ValueError(
                "ModelConfig llama3 rope needs rope_factor > 0, rope_high_freq_factor > "
                "rope_low_freq_factor > 0 and rope_original_context > 0"
            )
        if self.explicit_head_dim is not None:
            if isinstance(self.explicit_head_dim, bool) or self.explicit_head_dim <= 0:
                raise ValueError(
                    "ModelConfig.explicit_head_dim must be a positive int or None, "
                    f"got {self.explicit_head_dim!r}"
                )
        elif self.hidden % self.num_heads:
            raise ValueError(
                f"ModelConfig.hidden ({self.hidden}) must be divisible by num_heads "
                f"({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"the head dim must be even for rotary, got {self.head_dim}")
        if not self.rope_theta > 0:
            raise ValueError(f"ModelConfig.rope_theta must be > 0, got {self.rope_theta!r}")
        if not 0 < self.norm_eps < 1:
            raise ValueError(f"ModelConfig.norm_eps must be in (0, 1), got {self.norm_eps!r}")

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.hidden // self.num_heads

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of float32 K and V one token occupies over all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * 4

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {unknown}")
        return cls(**data)
