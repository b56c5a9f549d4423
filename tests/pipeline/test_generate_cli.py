"""`seer generate` end to end on a tiny Hugging Face folder: the chat template applied by
the folder's tokenizer, transformers' greedy tokens, one logprob per token in the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipeline.cli.main import main
from tests.hf_folders import make_hf_folder, make_tokenizer

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(120)


def test_seer_generate_writes_tokens_and_logprobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_hf_folder(tmp_path / "model", "qwen3", seed=3)
    out = tmp_path / "out.json"
    argv = ["generate", "--model", str(folder), "--prompt", "what is two plus three?"]
    assert main([*argv, "--chat", "--max-new-tokens", "10", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert set(record) >= {"text", "token_ids", "logprobs"}
    tokens, logprobs = record["token_ids"], record["logprobs"]
    assert 0 < len(tokens) == len(logprobs) <= 10
    assert record["text"] in capsys.readouterr().out
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "what is two plus three?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tok(prompt)["input_ids"]
    assert record["prompt_ids"] == ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        seq = ids + tokens
        logp = torch.log_softmax(hf(torch.tensor([seq])).logits[0].float(), dim=-1)
    picked = [float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(tokens)]
    greedy = [int(logp[len(ids) - 1 + i].argmax()) for i in range(len(tokens))]
    assert tokens == greedy  # transformers' greedy choice at every step
    assert max(abs(a - b) for a, b in zip(picked, logprobs, strict=True)) < 1e-4
    assert record["text"] == tok.decode(tokens, skip_special_tokens=True)


def test_seer_generate_bad_input_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_hf_folder(tmp_path / "model", "qwen2", tokenizer=False)
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    make_tokenizer(folder)
    assert main(["generate", "--model", str(folder), "--prompt", "zq " * 300]) == 2
    assert "context (max_position_embeddings) is 256" in capsys.readouterr().err
    (folder / "config.json").unlink()
    assert main(["generate", "--model", str(folder), "--prompt", "hi"]) == 2
    assert "config.json" in capsys.readouterr().err
