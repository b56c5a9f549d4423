from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actors.scheduler.policy import LONG_BAND, PROBE_FIRST
from pipeline.config import (
    ActorGroup,
    ConfigError,
    PipelineConfig,
    Topology,
    TransportConfig,
    config_to_toml,
    load_config,
    save_config,
)
from pipeline.launch.registry import validate_topology
from pipeline.rollout.api import rollout_config

GOOD = """
run_id = "exp1"
heartbeat_s = 0.5

[transport]
scheme = "ipc"
run_dir = "/tmp/seer-test"

[[topology.actors]]
role = "scheduler"
kind = "scheduler"
options = { policy = "baseline", chunk_size = 64 }

[[topology.actors]]
role = "worker"
kind = "generator"
count = 3
options = { max_batch = 8, model = { hidden = 64, max_context = 256 }, spec = { mode = "off" } }
"""


def test_toml_maps_onto_the_dataclasses(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    config = load_config(path)
    assert config.run_id == "exp1" and config.heartbeat_s == 0.5
    assert config.topology.group("worker").count == 3
    assert config.address("worker", 2) == "ipc:///tmp/seer-test/exp1/worker-2"
    validate_topology(config)
    again = load_config(save_config(config, tmp_path / "again.toml"))
    assert again == config


def test_addresses_per_scheme() -> None:
    topo = rollout_config().topology
    tcp = PipelineConfig(
        topology=topo, run_id="r", transport=TransportConfig(scheme="tcp", allow_insecure_tcp=True)
    )
    ports = {tcp.address(r, i) for r, i in topo.instances()} | {tcp.address("driver")}
    assert len(ports) == len(topo.instances()) + 1  # every endpoint its own port
    assert tcp.address("control") == "tcp://127.0.0.1:15500"
    inproc = PipelineConfig(topology=topo, run_id="r", transport=TransportConfig(scheme="inproc"))
    assert inproc.address("worker", 1) == "inproc://r/worker-1"
    assert PipelineConfig(topology=topo).run_id != PipelineConfig(topology=topo).run_id


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "run_id = 'x'\n[topology]\nactors = []\n[transport]\nschema = 'ipc'\n",
            "unknown keys ['schema']",
        ),
        (
            "[topology]\nactors = [{role = 'w', kind = 'generator', count = 0}]\n",
            "count must be >= 1",
        ),
        ("heartbeat_s = 'fast'\n[topology]\nactors = []\n", "heartbeat_s: expected float"),
        ("[topology]\nactors = []\n[transport]\nscheme = 'udp'\n", "'udp' is not one of"),
        ("[topology]\nactors = []\n[transport]\nscheme = 'tcp'\n", "needs transport.curve_keys"),
        ("[topology\n", "invalid TOML"),
        ("heartbeat_s = 1.0\n", "missing 1 required keyword-only argument: 'topology'"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert needle in str(info.value)


def test_missing_file_and_bad_actor_kinds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")
    bad_kind = PipelineConfig(topology=Topology(actors=(ActorGroup(role="x", kind="nosuch"),)))
    with pytest.raises(ConfigError, match="unknown actor kind 'nosuch'"):
        validate_topology(bad_kind)
    bad_option = PipelineConfig(
        topology=Topology(actors=(ActorGroup(role="d", kind="scheduler", options={"workers": 2}),))
    )
    with pytest.raises(ConfigError, match=r"options: unknown keys \['workers'\]"):
        validate_topology(bad_option)
    with pytest.raises(ConfigError, match="duplicate actor roles"):
        Topology(actors=(ActorGroup(role="a", kind="generator"),) * 2)
    assert "[[topology.actors]]" in config_to_toml(rollout_config())


@pytest.mark.parametrize(
    ("kind", "options", "needle"),
    [
        ("generator", {"max_batch": 0}, "GeneratorOptions.max_batch must be > 0, got 0"),
        ("generator", {"backend": "vllm"}, "backend must be one of ['builtin', 'sglang']"),
        ("generator", {"model": {"hidden": 30}}, "hidden (30) must be divisible by num_heads"),
        ("generator", {"spec": {"mode": "both"}}, "'both' is not one of"),
        ("scheduler", {"policy": "fastest"}, "SchedulerOptions.policy must be one of"),
        ("scheduler", {"kv_high_watermark": 1.5}, "kv_high_watermark must be in (0, 1]"),
        ("scheduler", {"long_band": 0.5}, "SchedulerOptions.long_band must be >= 1, got 0.5"),
        ("scheduler", {"probe_first": "sometimes"}, "SchedulerOptions.probe_first must be one of"),
        ("trainer", {"lr": 0.0}, "TrainerOptions.lr must be > 0"),
        ("drafts", {"max_depth": 0}, "DraftStoreOptions.max_depth must be > 0"),
    ],
)
def test_bad_options_fail_in_the_launching_process_naming_the_key(
    kind: str, options: dict[str, object], needle: str
) -> None:
    config = PipelineConfig(
        topology=Topology(actors=(ActorGroup(role="x", kind=kind, options=options),))
    )
    with pytest.raises(ConfigError) as info:
        validate_topology(config)
    assert "topology.actors.x.options" in str(info.value) and needle in str(info.value)


RUN = """
iterations = 3
[trainer]
lr = 0.01
[generator]
max_batch = 8
"""


def test_a_run_toml_nests_the_trainers_options(tmp_path: Path) -> None:
    """`seer run --config`: `[trainer]` is `RunConfig.trainer`; a table's keys left out keep
    RunConfig's defaults (not the options class's), and the flags apply on top."""
    from pipeline.cli.main import build_parser
    from pipeline.cli.run import run_config
    from pipeline.rl.config import RUN_TRAINER, RunConfig, rl_topology

    path = tmp_path / "run.toml"
    path.write_text(RUN)
    args = build_parser().parse_args(
        ["run", "--config", str(path), "--trainer-ranks", "2", "--out", str(tmp_path / "o")]
    )
    cfg = run_config(args)
    assert cfg.iterations == 3 and cfg.trainer_ranks == 2 and cfg.out_dir == str(tmp_path / "o")
    assert cfg.trainer.lr == 0.01
    assert cfg.trainer.micro_batch_size == RUN_TRAINER.micro_batch_size == 32
    assert cfg.trainer.mini_batch_size == 128
    assert cfg.generator.max_batch == 8
    assert cfg.generator.max_prefill_tokens == RunConfig().generator.max_prefill_tokens
    assert cfg.generator.model.max_context == 512
    trainer = rl_topology(cfg, "").topology.group("trainer")
    assert trainer.count == 2 and trainer.options["lr"] == 0.01
    assert trainer.options["model"]["max_context"] == 512 and trainer.options["seed"] == 0
    topo = rl_topology(cfg, "").topology  # the history knobs reach their actors
    assert topo.group("estimator").options == {"use_prior": cfg.length_prior}
    assert topo.group("drafts").options == {"keep_history": cfg.draft_history}
    assert topo.group("scheduler").options["long_band"] == cfg.long_band == LONG_BAND
    with pytest.raises(ValueError, match=r"RunConfig\.long_band must be >= 1, got 0\.9"):
        dataclasses.replace(cfg, long_band=0.9)
    assert topo.group("scheduler").options["probe_first"] == cfg.probe_first == PROBE_FIRST
    unknown = rl_topology(dataclasses.replace(cfg, probe_first="unknown"), "").topology
    assert unknown.group("scheduler").options["probe_first"] == "unknown"
    with pytest.raises(ValueError, match=r"RunConfig\.probe_first must be one of"):
        dataclasses.replace(cfg, probe_first="sometimes")
    off = rl_topology(dataclasses.replace(cfg, length_prior=False), "").topology
    assert off.group("estimator").options == {"use_prior": False}
    with pytest.raises(ConfigError, match="unknown keys \\['lr'\\]"):
        path.write_text("lr = 0.01\n")  # the old flat key
        run_config(build_parser().parse_args(["run", "--config", str(path)]))
    with pytest.raises(ConfigError, match=r"trainer\.seed is set by the run"):
        path.write_text("[trainer]\nseed = 3\n")
        run_config(build_parser().parse_args(["run", "--config", str(path)]))


def test_an_ipc_run_dir_too_deep_for_a_unix_socket_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    import anyio

    from pipeline.launch.local import launch_local

    deep = tmp_path / ("d" * (110 - len(str(tmp_path))))
    config = rollout_config(num_generators=2, run_dir=str(deep))  # fine until it is launched
    with pytest.raises(
        ConfigError, match=r"transport.run_dir: the ipc socket path .* over the 107"
    ):
        config.check_ipc_paths()

    async def go() -> None:
        async with launch_local(config):
            pytest.fail("launched")

    with pytest.raises(ConfigError, match=r"choose a shorter transport\.run_dir"):
        anyio.run(go)
    assert not deep.exists()  # nothing was made
    rollout_config(num_generators=2, run_dir=str(tmp_path)).check_ipc_paths()  # short: fine
    tcp = dataclasses.replace(config.transport, scheme="inproc")
    dataclasses.replace(config, transport=tcp).check_ipc_paths()  # no unix socket: fine
