"""`seer generate`: one completion from a Hugging Face model folder on the built-in engine.

The quickest way to see a model folder load, and what tests and users call to compare seer
with other engines: the folder's tokenizer (``AutoTokenizer``) encodes ``--prompt`` (with
``--chat``, as one user message through the folder's chat template with the generation
prompt added), the built-in ``TorchEngine`` generates (greedy at temperature 0; stops at
the folder's EOS ids or after ``--max-new-tokens``), the text is printed, and ``--json``
writes ``{"text", "token_ids", "logprobs"}``: one log-probability per generated token, as
the engine records it (greedy: the token's log-probability under the model's own
distribution; temperature > 0: under the sampling distribution after temperature).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    gen = sub.add_parser("generate", help="generate text from a Hugging Face model folder")
    gen.add_argument("--model", required=True, help="a Hugging Face model folder (with tokenizer)")
    gen.add_argument("--prompt", required=True, help="the prompt text")
    gen.add_argument("--chat", action="store_true", help="apply the folder's chat template")
    gen.add_argument("--max-new-tokens", type=int, default=64, help="at most this many tokens")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--seed", type=int, default=0, help="the sampling seed")
    gen.add_argument("--dtype", default="auto", help="auto (stored), float32, bfloat16, float16")
    gen.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    gen.add_argument("--json", default="", help='write {"text", "token_ids", "logprobs"} here')
    return gen


def generate(
    model_dir: str,
    prompt: str,
    *,
    chat: bool = False,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
    dtype: str = "auto",
    device: str = "cpu",
) -> Generation:
    """One completion of ``prompt`` (see the module docstring)."""
    from actors.generator import ChunkRequest, SamplingParams
    from actors.generator.builtin import EngineConfig, TorchEngine
    from actors.model import ModelFolderError, load_pretrained, load_tokenizer, read_folder

    if max_new_tokens <= 0:
        raise ValueError(f"--max-new-tokens must be > 0, got {max_new_tokens}")
    info = read_folder(model_dir)
    tokenizer = load_tokenizer(model_dir)
    prompt_ids = _encode(tokenizer, prompt, chat, model_dir)
    context = info.config.max_context
    needed = len(prompt_ids) + max_new_tokens
    if len(prompt_ids) >= context:
        raise ModelFolderError(
            f"{model_dir}: the prompt has {len(prompt_ids)} tokens; the model's context "
            f"(max_position_embeddings) is {context}"
        )
    max_seq = min(needed, context)
    model = load_pretrained(model_dir, dtype=dtype, device=device, max_context=max_seq)
    eos = list(info.eos_token_ids)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(int(tokenizer.eos_token_id))
    config = EngineConfig(
        max_batch=1,
        kv_budget_tokens=max_seq,
        max_seq_len=max_seq,
        eos_token_id=eos[0] if eos else None,
        profile=False,
    )
    engine = TorchEngine(model, config)
    params = SamplingParams(temperature=temperature, seed=seed, stop_token_ids=tuple(eos[1:]))
    engine.add(ChunkRequest("generate", tuple(prompt_ids), max_new_tokens, params=params))
    token_ids: list[int] = []
    logprobs: list[float] = []
    reason = "length"
    while engine.has_work():
        step = engine.step()
        for delta in step.deltas:
            token_ids.extend(delta.token_ids)
            logprobs.extend(delta.logprobs)
        for result in step.finished:
            reason = result.finish_reason
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    return Generation(prompt_ids, token_ids, logprobs, text, reason)


def _encode(tokenizer: Any, prompt: str, chat: bool, model_dir: str) -> list[int]:
    from actors.model import ModelFolderError

    if not chat:
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if not tokenizer.chat_template:
        raise ModelFolderError(f"{model_dir}: --chat asked, but the folder has no chat_template")
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def run(args: argparse.Namespace) -> int:
    """Generate, print the text, and write --json if asked."""
    out = generate(
        args.model,
        args.prompt,
        chat=args.chat,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
    )
    print(out.text, flush=True)
    if args.json:
        record = {
            "text": out.text,
            "token_ids": out.token_ids,
            "logprobs": out.logprobs,
            "prompt_ids": out.prompt_ids,
            "finish_reason": out.finish_reason,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record) + "\n")
    return 0
