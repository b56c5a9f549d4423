"""SGLang layouts (servers, `--tp-size` per server): `seer serve --tp-size N` runs N intra-op
threads and says so in `/server_info`; a live layout switch stops the generators' launched
`seer serve` servers and launches the new count with the new tp size, at the same weight
version, and the next rollout trains on-policy. Attached servers cannot be relaunched."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from actors.generator import GeneratorOptions
from actors.generator.sglang.launch import ServerProcess, fill_command, free_port
from pipeline.launch.backend import SEER_SERVE_COMMAND, use_backend
from pipeline.rl.layout_switch import current_layout, make_selector, with_layout
from pipeline.rl.loop import train
from pipeline.rl.selector import Layout, LayoutProfile, ProfileError, ProfileRow
from tests.pipeline.test_rl_loop import TINY, toy_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def sglang_generator(**sglang: Any) -> GeneratorOptions:
    gen = use_backend(TINY, "sglang", command=SEER_SERVE_COMMAND)
    spec = dataclasses.replace(gen.spec, mode="off")
    opts = dataclasses.replace(gen.sglang, base_port=0, request_timeout_s=60.0, **sglang)
    return dataclasses.replace(gen, spec=spec, sglang=opts)


def profile_file(tmp_path: Path) -> str:
    rows = [  # 1 server x tp 2 wins at every context: leave the starting 2 x 1
        ProfileRow(Layout(1, 2), ctx, 8, 200.0) for ctx in (16, 64)
    ] + [ProfileRow(Layout(2, 1), ctx, 8, 100.0) for ctx in (16, 64)]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(LayoutProfile(rows).to_json()))
    return str(path)


@pytest.mark.timeout(120)
async def test_seer_serve_tp_size_is_its_intra_op_threads(tmp_path: Path) -> None:
    port = free_port()
    args = fill_command(SEER_SERVE_COMMAND, model="", host="127.0.0.1", port=port, tp_size=2)
    assert args[args.index("--tp-size") + 1] == "2"
    server = ServerProcess(args, f"http://127.0.0.1:{port}", tmp_path / "serve.log")
    try:
        await server.start(timeout_s=90)
        async with httpx.AsyncClient(base_url=server.url) as http:
            info = (await http.get("/server_info")).json()
        assert info["tp_size"] == 2
    finally:
        server.stop()


def test_sglang_layouts_map_to_servers_and_tp_size(tmp_path: Path) -> None:
    cfg = toy_config(tmp_path, generator=sglang_generator(), layout_profile=profile_file(tmp_path))
    assert current_layout(cfg) == Layout(2, 1)
    moved = with_layout(cfg, Layout(1, 2))
    assert (moved.num_generators, moved.generator.sglang.tp_size) == (1, 2)
    assert moved.generator.num_threads == cfg.generator.num_threads  # not the generators'
    attached = dataclasses.replace(
        cfg, generator=use_backend(cfg.generator, urls=["http://a:1", "http://b:2"])
    )
    with pytest.raises(ProfileError, match="attached"):
        make_selector(attached)
    fixed = sglang_generator(command=("seer", "serve", "--port", "{port}"))
    with pytest.raises(ProfileError, match="tp_size"):
        make_selector(dataclasses.replace(cfg, generator=fixed))


@pytest.mark.timeout(300)
async def test_sglang_layout_switch_relaunches_servers_with_the_new_tp_size(
    tmp_path: Path,
) -> None:
    cfg = toy_config(
        tmp_path, iterations=2, layout_profile=profile_file(tmp_path), mode="inprocess",
        eval_prompts=0, generator=sglang_generator(),
    )  # fmt: skip
    with capture_logs() as logs:
        out = await train(cfg)
    launched = [e["args"] for e in logs if e["event"] == "sglang_launching"]
    assert [a[a.index("--tp-size") + 1] for a in launched] == ["1", "1", "2"]
    assert [r["layout"] for r in out] == ["2x1", "1x2"]
    assert out[0]["layout_switch_s"] > 0 and out[0]["num_layout_switches"] == 1
    assert [r["weight_version"] for r in out] == [1, 2]  # continuous across the switch
    assert all(r["train_num_samples"] == 16 for r in out)  # every sample trained on-policy
