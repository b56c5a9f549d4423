"""The SGLang backend end to end over real HTTP: rollouts over two `seer serve` processes
(SGLang's own schema judging every request and response), against the built-in engine."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelOptions
from actors.model.weights import load_model, save_model
from pipeline.rollout.api import Rollout, rollout_config
from tests.pipeline.sglang_servers import SERVE_COMMAND, kill, seer_servers
from tests.pipeline.tiny import TINY_MODEL
from transport.messages import ActorStats, GetStats, PromptSpec, SamplingSpec

pytestmark = pytest.mark.timeout(240)

EOS = 258
POLICIES = ("baseline", "divided", "context_aware", "oracle")
PROMPTS = [PromptSpec(prompt_id=f"q{i}", token_ids=(3 + i, 40, 50 + 2 * i)) for i in range(3)]
GREEDY = SamplingSpec(temperature=0.0, max_new_tokens=24, stop_token_ids=(EOS,))
FAST_WATCH = {"health_interval_s": 0.3, "health_timeout_s": 3.0}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / "tiny.safetensors"
    config = ModelOptions(**TINY_MODEL).config()
    save_model(LlamaModel.random(config, seed=3), path)
    return str(path)


def greedy_reference(model: str, sampling: SamplingSpec) -> list[tuple[int, ...]]:
    """Every sample's greedy tokens from one built-in engine, no scheduler (3 per prompt)."""
    engine = TorchEngine(load_model(model), EngineConfig(eos_token_id=EOS, profile=False))
    params = SamplingParams(temperature=0.0, ignore_eos=sampling.ignore_eos)
    for p in PROMPTS:
        engine.add(ChunkRequest(p.prompt_id, p.token_ids, sampling.max_new_tokens, params=params))
    out: dict[str, tuple[int, ...]] = {p.prompt_id: () for p in PROMPTS}
    while engine.has_work():
        for chunk in engine.poll().finished:
            out[chunk.request_id] = chunk.token_ids
    return [out[p.prompt_id] for p in PROMPTS for _ in range(3)]


def generator(model: str, urls: list[str] | None = None) -> dict[str, Any]:
    gen: dict[str, Any] = {
        "model": {**TINY_MODEL, "path": model},
        "max_batch": 8,
        "eos_token_id": EOS,
        "spec": {"mode": "off"},
    }
    if urls is not None:
        gen["backend"] = "sglang"
        gen["sglang"] = {"urls": urls, "request_timeout_s": 60.0, "health_interval_s": 0.3}
    return gen


async def rollouts(
    gen: dict[str, Any], tmp: Path, policies: tuple[str, ...], sampling: SamplingSpec = GREEDY
) -> dict[str, list[tuple[int, ...]]]:
    config = rollout_config(num_generators=2, chunk_size=8, generator=gen, run_dir=str(tmp))
    out = {}
    # forced_lens at the token budget change no output (EOS still ends a sample) and give
    # the oracle policy the true lengths it requires
    budget = (sampling.max_new_tokens,) * 3
    prompts = [dataclasses.replace(p, forced_lens=budget) for p in PROMPTS]
    async with Rollout(config, mode="inprocess") as rollout:
        for policy in policies:
            groups = await rollout.generate(prompts, 3, sampling, policy=policy)
            out[policy] = [s.token_ids for g in groups for s in g.samples]
    return out


def test_greedy_rollouts_over_seer_serve_equal_the_builtin_engine_for_every_policy(
    model_path: str, tmp_path: Path
) -> None:
    async def main() -> None:
        builtin = await rollouts(generator(model_path), tmp_path / "b", POLICIES)
        async with seer_servers(model_path, 2, tmp_path) as servers:
            urls = [s.url for s in servers]
            over_http = await rollouts(generator(model_path, urls), tmp_path / "s", POLICIES)
        assert over_http == builtin
        assert builtin["baseline"] == greedy_reference(model_path, GREEDY)
        assert any(len(t) > 8 for t in builtin["baseline"])  # several chunks per sample

    anyio.run(main)


def test_a_weight_update_reaches_every_server_and_outputs_carry_the_new_version(
    model_path: str, tmp_path: Path
) -> None:
    new = LlamaModel.random(ModelOptions(**TINY_MODEL).config(), seed=4)
    new_path = tmp_path / "new.safetensors"
    save_model(new, new_path)
    reference = greedy_reference(str(new_path), GREEDY)

    async def main() -> None:
        async with seer_servers(model_path, 2, tmp_path) as servers:
            urls = [s.url for s in servers]
            config = rollout_config(
                num_generators=2, chunk_size=8, generator=generator(model_path, urls)
            )
            async with Rollout(config, mode="inprocess") as rollout:
                before = await rollout.generate(PROMPTS, 3, GREEDY, policy="divided")
                await rollout.update_weights(new.state_dict(), version=1)
                after = await rollout.generate(PROMPTS, 3, GREEDY, policy="divided")
            async with httpx.AsyncClient() as http:
                infos = [(await http.get(f"{u}/model_info")).json() for u in urls]
                bad = {"input_ids": [1], "sampling_params": {"max_tokens": 4}}
                refused = await http.post(f"{urls[0]}/generate", json=bad)
        assert refused.status_code == 400 and "SGLang schema" in refused.text  # the gate is on
        assert all(
            s.weight_versions == (0,) * len(s.weight_versions) for g in before for s in g.samples
        )
        assert all(set(s.weight_versions) == {1} for g in after for s in g.samples)
        assert [info["weight_version"] for info in infos] == ["1", "1"]
        assert [s.token_ids for g in after for s in g.samples] == reference

    anyio.run(main)


def test_launched_servers_take_the_weights_through_sglangs_distributed_update(
    model_path: str, tmp_path: Path
) -> None:
    """The generator launches its `seer serve` (SGLang's schema gate judging every
    `/generate` and control body) with `{server_args}` (`--skip-tokenizer-init
    --context-length 200`), forms the weight-update group with it, and a published version
    arrives by gloo broadcast, not by disk."""
    new = LlamaModel.random(ModelOptions(**TINY_MODEL).config(), seed=4)
    reference = greedy_reference_of(new, GREEDY)
    gen = generator(model_path)
    gen["backend"] = "sglang"
    gen["sglang"] = {
        "command": [*SERVE_COMMAND, "{server_args}"],
        "base_port": 0,
        "context_len": 200,
        "weight_sync": "distributed",
        "weights_dir": str(tmp_path / "w"),
        "request_timeout_s": 60.0,
    }

    async def main() -> None:
        config = rollout_config(
            num_generators=1, chunk_size=8, generator=gen, run_dir=str(tmp_path)
        )
        async with Rollout(config, mode="inprocess") as rollout:
            await rollout.update_weights(new.state_dict(), version=1)
            after = await rollout.generate(PROMPTS, 3, GREEDY, policy="divided")
        assert all(set(s.weight_versions) == {1} for g in after for s in g.samples)
        assert [s.token_ids for g in after for s in g.samples] == reference

    anyio.run(main)
    logs = "".join(p.read_text() for p in (tmp_path / "w").glob("server-*.log"))
    assert "Traceback" not in logs
    written = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert written == ["gen0-initial", "server-0.log"]  # no folder for version 1


def greedy_reference_of(model: LlamaModel, sampling: SamplingSpec) -> list[tuple[int, ...]]:
    path = Path(tempfile.mkdtemp()) / "m.safetensors"
    save_model(model, path)
    return greedy_reference(str(path), sampling)


def test_a_server_killed_mid_rollout_loses_and_duplicates_no_sample(
    model_path: str, tmp_path: Path
) -> None:
    sampling = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=40)

    reference = greedy_reference(model_path, sampling)

    async def main() -> None:
        slow = ("--step-delay-ms", "20")  # rounds of chunks take long enough to kill one
        async with seer_servers(model_path, 2, tmp_path, slow) as servers:
            gen = generator(model_path, [s.url for s in servers])
            config = rollout_config(
                num_generators=2, chunk_size=8, generator=gen, scheduler=FAST_WATCH
            )
            async with Rollout(config, mode="inprocess") as rollout:
                killed = anyio.Event()

                async def kill_once_it_has_results() -> None:
                    while True:
                        stats = await rollout._cluster().call("generator", 0, GetStats())
                        assert isinstance(stats, ActorStats)
                        if stats.counters["num_chunks"] >= 3:
                            kill(servers[0])
                            killed.set()
                            return
                        await anyio.sleep(0.01)

                with anyio.fail_after(120):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(kill_once_it_has_results)
                        result = await rollout.generate_with_record(
                            PROMPTS, 3, sampling, policy="divided"
                        )
                        tg.cancel_scope.cancel()
                stats = await rollout._cluster().call("scheduler", 0, GetStats())
                gen0 = await rollout._cluster().call("generator", 0, GetStats())
        assert killed.is_set(), "the rollout ended before the kill: nothing was tested"
        samples = [s.token_ids for g in result.groups for s in g.samples]
        assert samples == reference  # every sample, each token once
        assert all(len(t) == 40 for t in samples)
        assert isinstance(stats, ActorStats) and stats.counters["generators_lost"] == 1
        assert isinstance(gen0, ActorStats) and gen0.counters["num_lost_chunks"] >= 1

    anyio.run(main)


@pytest.fixture
def run_config(tmp_path: Path) -> Iterator[Path]:
    toml = tmp_path / "run.toml"
    model = "\n".join(f"{k} = {v}" for k, v in TINY_MODEL.items())
    toml.write_text(
        "prompts_per_iteration = 4\ngroup_size = 2\nmax_new_tokens = 16\neval_prompts = 0\n"
        "checkpoint_every = 0\ncurriculum = false\n"
        'mode = "inprocess"\n'
        f'cache_dir = "{tmp_path / "cache"}"\n'
        "[trainer]\nmicro_batch_size = 8\nmini_batch_size = 8\n"
        '[generator]\nmax_batch = 8\n[generator.spec]\nmode = "off"\n'
        f"[generator.model]\n{model}\n"
        "[generator.sglang]\nbase_port = 0\nrequest_timeout_s = 60.0\n"
    )
    yield toml


@pytest.mark.slow
def test_seer_run_with_the_sglang_backend_completes_over_seer_serve(
    run_config: Path, tmp_path: Path
) -> None:
    command = " ".join(SERVE_COMMAND)
    out = tmp_path / "run"
    args = ["--config", str(run_config), "--backend", "sglang", "--sglang-command", command]
    args += ["--iterations", "2", "--warm-start-steps", "0", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2 and '"weight_version": 2' in rows[-1]
