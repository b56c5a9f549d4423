"""ByteTokenizer: the tokenizer of the embedded default model.

Ids ``0..255`` are the bytes ``0..255`` (so a task may also use them directly as 256 small
numbers, one token each); special tokens follow from 256 in the order given, by default
``<pad>`` = 256, ``<bos>`` = 257, ``<eos>`` = 258, for a vocabulary of 259. ``encode`` turns
text into its UTF-8 bytes (optionally with BOS/EOS); ``decode`` turns ids back into text,
dropping specials unless asked to render them by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

NUM_BYTES = 256
DEFAULT_SPECIALS = ("<pad>", "<bos>", "<eos>")


class ByteTokenizer:
    def __init__(self, specials: Sequence[str] = DEFAULT_SPECIALS) -> None:
        if len(set(specials)) != len(specials):
            raise ValueError(f"special tokens must be distinct, got {list(specials)}")
        for required in DEFAULT_SPECIALS:
            if required not in specials:
                raise ValueError(f"special tokens must include {required!r}")
        self.specials = tuple(specials)
        self._special_ids = {name: NUM_BYTES + i for i, name in enumerate(self.specials)}

    @property
    def vocab_size(self) -> int:
        return NUM_BYTES + len(self.specials)

    @property
    def pad_id(self) -> int:
        return self._special_ids["<pad>"]

    @property
    def bos_id(self) -> int:
        return self._special_ids["<bos>"]

    @property
    def eos_id(self) -> int:
        return self._special_ids["<eos>"]

    def special_id(self, name: str) -> int:
        try:
            return self._special_ids[name]
        except KeyError:
            raise ValueError(f"unknown special token {name!r}; known: {self.specials}") from None

    def is_special(self, token_id: int) -> bool:
        return NUM_BYTES <= token_id < self.vocab_size

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], render_specials: bool = False) -> str:
        out: list[str] = []
        pending = bytearray()
        for tok in ids:
            if not 0 <= tok < self.vocab_size:
                raise ValueError(f"token {tok} is outside [0, {self.vocab_size})")
            if tok < NUM_BYTES:
                pending.append(tok)
                continue
            out.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            if render_specials:
                out.append(self.specials[tok - NUM_BYTES])
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)
