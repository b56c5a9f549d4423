"""A tiny Hugging Face tokenizer folder made in the test (no downloads): a byte-level BPE
trained with `tokenizers`, wrapped in transformers' `PreTrainedTokenizerFast` with BOS, EOS,
pad and a chat template, saved with `save_pretrained` so `AutoTokenizer` loads it like a
real model folder's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BOS, EOS, PAD, END_OF_TEXT = "<s>", "<|end|>", "<pad>", "</s>"
SPECIAL = [PAD, BOS, END_OF_TEXT, EOS, "<|user|>", "<|assistant|>", "<|system|>"]

#: writes the BOS itself (as Llama 3's does), one turn per message, then the assistant's turn
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

CORPUS = [
    "What is 2 + 3? The answer is 5.",
    "Calculate 12 - 7. Answer: 5",
    "The quick brown fox jumps over the lazy dog.",
    "<answer>42</answer> and <answer>-4</answer>",
    "Please reply with a short greeting: hello world, hi there.",
] * 20


def make_tokenizer_folder(
    folder: Path,
    *,
    chat_template: str | None = CHAT_TEMPLATE,
    add_bos: bool = True,
    vocab_size: int | None = 400,
    generation_eos: Any = None,
) -> Path:
    """A model folder holding only a tokenizer (`add_bos`: its post-processor adds BOS, as
    Llama's does), a `config.json` with `vocab_size` (None: none written) and, with
    `generation_eos`, a `generation_config.json` naming it as `eos_token_id`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    if add_bos:
        bos_id = tok.token_to_id(BOS)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    if vocab_size is not None:
        (folder / "config.json").write_text(json.dumps({"vocab_size": vocab_size}))
    if generation_eos is not None:
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": generation_eos}))
    return folder
