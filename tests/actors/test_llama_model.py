"""The model: config checks, cached forward == plain forward, tree positions, weights I/O."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from actors.generator.builtin.draft_tree import validate_draft
from actors.generator.builtin.kv_cache import KVCache
from actors.generator.builtin.runner import ModelRunner, Segment
from actors.generator.engine import Draft
from actors.model import (
    ByteTokenizer,
    LlamaModel,
    ModelConfig,
    ModelFolderError,
    load_hf_folder,
    load_model,
    save_model,
)
from tests.actors.engine_util import TINY, tiny_model


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("hidden", 30, "divisible by num_heads"),
        ("num_kv_heads", 3, "multiple of num_kv_heads"),
        ("num_layers", 0, "positive int"),
        ("rope_theta", 0.0, "rope_theta"),
        ("norm_eps", 2.0, "norm_eps"),
    ],
)
def test_config_rejects_bad_shapes(field: str, value: object, match: str) -> None:
    args = TINY.to_dict() | {field: value}
    with pytest.raises(ValueError, match=match):
        ModelConfig(**args)


def test_cached_forward_in_pieces_matches_plain_forward() -> None:
    model = tiny_model()
    ids = torch.randint(0, TINY.vocab_size, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(ids)  # (2, 20, V)
    runner = ModelRunner(model, KVCache(TINY, 2, 64))
    got = [[], []]
    for lo, hi in [(0, 7), (7, 8), (8, 15), (15, 20)]:  # chunked prefill, decode, prefill
        segs = [Segment(lo, ids[b, lo:hi].tolist(), list(range(lo, hi))) for b in range(2)]
        logits = runner.forward(0, segs).view(2, hi - lo, -1)
        for b in range(2):
            got[b].append(logits[b])
    for b in range(2):
        torch.testing.assert_close(torch.cat(got[b]), expected[b], rtol=1e-4, atol=1e-4)


def test_tree_verify_logits_match_each_path() -> None:
    model = tiny_model()
    prefix = [3, 1, 4, 1, 5]
    draft = Draft((9, 2, 6, 5, 7), (-1, -1, 0, 0, 2))  # two branches, depth up to 3
    tree = validate_draft(draft, TINY.vocab_size, 8)
    runner = ModelRunner(model, KVCache(TINY, 1, 64))
    ctx = len(prefix) - 1
    runner.forward(0, [Segment(0, prefix[:-1], list(range(ctx)))])
    seg = Segment(ctx, [prefix[-1], *draft.token_ids], [ctx + d for d in tree.depths], tree.mask)
    logits = runner.forward(0, [seg])  # (6, V)
    for node in range(len(draft.token_ids)):
        path, cur = [], node
        while cur != -1:
            path.append(draft.token_ids[cur])
            cur = draft.parents[cur]
        with torch.no_grad():
            ref = model(torch.tensor([prefix + path[::-1]]))[0, -1]
        torch.testing.assert_close(logits[node + 1], ref, rtol=1e-4, atol=1e-4)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    model = tiny_model()
    save_model(model, tmp_path / "m.safetensors")
    loaded = load_model(tmp_path / "m.safetensors")
    ids = torch.tensor([[1, 2, 3, 4]])
    assert loaded.config == model.config
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_load_local_hf_folder(tmp_path: Path, model_type: str) -> None:
    qwen = model_type == "qwen2"
    cfg = ModelConfig(**(TINY.to_dict() | {"tie_embeddings": qwen, "attention_bias": qwen}))
    model = LlamaModel.random(cfg, seed=5, std=0.3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_()
    state = {f"model.{k}": v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    if not qwen:
        state["lm_head.weight"] = model.lm_head.weight.detach()
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    hf = {
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "intermediate_size": cfg.intermediate,
        "max_position_embeddings": cfg.max_context,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": qwen,
    }
    (tmp_path / "config.json").write_text(json.dumps(hf))
    loaded = load_hf_folder(tmp_path)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))


def test_load_hf_folder_needs_a_config(tmp_path: Path) -> None:
    with pytest.raises(ModelFolderError, match=r"config\.json not found"):
        load_hf_folder(tmp_path)


def test_byte_tokenizer() -> None:
    tok = ByteTokenizer()
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (256, 257, 258, 259)
    ids = tok.encode("héllo", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and max(ids[1:-1]) < 256
    assert tok.decode(ids) == "héllo"
    assert tok.decode(ids, render_specials=True) == "<bos>héllo<eos>"
    assert tok.decode([0, 255]) == "\x00\ufffd"
    with pytest.raises(ValueError, match="outside"):
        tok.decode([259])
