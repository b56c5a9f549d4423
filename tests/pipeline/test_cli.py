"""The `seer` command line: --version, --log-level, one-line errors and their exit codes,
per-command flags of `seer bench NAME` / `seer sim NAME`, dotted overrides, --print-config,
choices checked at parse time."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import Any

import pytest
import structlog

from actors.scheduler.policy import POLICY_NAMES
from pipeline.cli import bench as bench_cli
from pipeline.cli import keys as keys_cli
from pipeline.cli import run as run_cli
from pipeline.cli import sim as sim_cli
from pipeline.cli.main import build_parser, main
from pipeline.config import ConfigError, apply_overrides, build_options
from pipeline.logs import LEVEL_ENV
from pipeline.rl.config import RUN_POLICIES, RunConfig
from pipeline.rollout.api import RolloutError


def exits(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `seer argv` where argparse exits (help, a bad flag)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = exits(["--version"], capsys)
    assert code == 0 and out.startswith("seer-rl ") and len(out.split()) >= 2


def test_log_level_flag_and_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(LEVEL_ENV, "info")  # restored after the test: main sets it
    monkeypatch.setattr("pipeline.logs._configured", False)
    assert main(["--log-level", "error", "run", "--print-config"]) == 0
    import os

    assert os.environ[LEVEL_ENV] == "error"  # the actors this command starts inherit it
    log = structlog.get_logger()
    log.warning("hidden_at_error_level")
    log.error("shown_at_error_level")
    err = capsys.readouterr().err
    assert "shown_at_error_level" in err and "hidden_at_error_level" not in err
    monkeypatch.setenv(LEVEL_ENV, "loud")
    assert main(["run", "--print-config"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"seer: error: {LEVEL_ENV}='loud' is not one of debug, info, warning, error"
    )
    assert exits(["--log-level", "loud", "keys", "x"], capsys)[0] == 2
    structlog.reset_defaults()


def test_user_errors_are_one_line_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.toml"
    assert main(["run", "--config", str(missing)]) == 2
    assert capsys.readouterr().err == f"seer: error: config file not found: {missing}\n"
    bad = tmp_path / "bad.toml"
    bad.write_text("iterations = [\n")
    assert main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seer: error: {bad}: invalid TOML") and "Traceback" not in err
    bad.write_text('[generator]\nmax_batch = "many"\n')
    assert main(["run", "--config", str(bad), "--print-config"]) == 2
    assert capsys.readouterr().err == (
        f"seer: error: {bad}.generator.max_batch: expected int, got str\n"
    )


def test_runtime_errors_exit_1_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def lost(args: Any) -> int:  # what a rollout raises through anyio's task group
        raise ExceptionGroup("run", [RolloutError("actor generator-1 was lost (exit -9)")])

    monkeypatch.setattr(keys_cli, "run", lost)
    assert main(["keys", str(Path("unused"))]) == 1
    err = capsys.readouterr().err
    assert err == (
        "seer: error: RolloutError: actor generator-1 was lost (exit -9) (--debug: the traceback)\n"
    )
    assert main(["--debug", "keys", "unused"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("seer: error: RolloutError")
    monkeypatch.setattr(keys_cli, "run", lambda args: (_ for _ in ()).throw(ConnectionError("x")))
    assert main(["keys", "unused"]) == 1


def test_each_bench_and_sim_lists_only_its_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    flags = {}
    for group, commands in (("bench", bench_cli.BENCHES), ("sim", sim_cli.SIMS)):
        for name in commands:
            code, out, _ = exits([group, name, "--help"], capsys)
            assert code == 0 and f"seer {group} {name}" in out
            flags[group, name] = {w.split("[")[0] for w in out.split() if w.startswith("--")}
            assert "--json" in flags[group, name]
    assert "--trace" in flags["bench", "rollout"] and "--trace" not in flags["bench", "engine"]
    assert "--shape" in flags["bench", "engine"] and "--shape" not in flags["bench", "rollout"]
    assert "--seeds" in flags["sim", "validate"] and "--seeds" not in flags["sim", "seer"]
    # a flag of another bench is an error, not silently ignored
    code, _, err = exits(["bench", "transport", "--trace", "t.json"], capsys)
    assert code == 2 and "unrecognized arguments: --trace" in err
    code, _, err = exits(["bench", "nosuch"], capsys)
    assert code == 2 and "invalid choice: 'nosuch'" in err


def test_bench_and_sim_flags_reach_their_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def record(name: str) -> Any:
        return lambda *a, **kw: calls.append((name, a, kw))

    rollout = importlib.import_module("pipeline.bench.rollout")
    seer = importlib.import_module("pipeline.sim.seer")
    sglang_rollout = importlib.import_module("pipeline.bench.sglang_rollout")
    monkeypatch.setattr(rollout, "run", record("rollout"))
    monkeypatch.setattr(sglang_rollout, "run", record("sglang"))
    monkeypatch.setattr(seer, "run", record("seer"))
    assert main(["bench", "rollout", "--quick", "--repeats", "2", "--json", "r.json"]) == 0
    assert main(["bench", "rollout", "--backend", "sglang", "--chunk-size", "64"]) == 0
    assert main(["bench", "rollout", "--backend", "sglang", "--trace", "t.json"]) == 2
    assert "--trace is for the builtin" in capsys.readouterr().err
    assert main(["sim", "seer", "--quick"]) == 0
    assert main(["sim", "seer", "--workload", "kimi-k2", "--scale", "0.5"]) == 0
    (_, a, kw), (name, _, kw2), (_, _, q), (_, _, full) = calls
    assert a == ("r.json",) and kw["repeats"] == 2 and kw["quick"] and kw["trace"] is None
    assert name == "sglang" and kw2["chunk_size"] == 64
    assert q["workloads"] == ("moonlight",) and q["scale"] == seer.QUICK_SCALE
    assert full["workloads"] == ("kimi-k2",) and full["scale"] == 0.5


def test_sim_seer_epochs_takes_its_seed_and_long_band(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = []
    epochs = importlib.import_module("pipeline.sim.epochs")
    monkeypatch.setattr(epochs, "run", lambda *a, **kw: calls.append(kw))
    assert main(["sim", "seer", "--epochs", "2", "--seed", "3", "--long-band", "1.5"]) == 0
    assert main(["sim", "seer", "--epochs", "1"]) == 0
    assert [(c["seed"], c["long_band"]) for c in calls] == [(3, 1.5), (0, None)]
    assert main(["sim", "seer", "--long-band", "1.5"]) == 2  # a usage error, named
    assert "--long-band need --epochs" in capsys.readouterr().err


def test_overrides_are_typed_like_the_toml(tmp_path: Path) -> None:
    cfg = apply_overrides(
        RunConfig(),
        ["generator.max_batch=64", "trainer.lr=5e-4", "task=countdown", "run_id=123",
         "curriculum=false", 'policy="divided"'],
    )  # fmt: skip
    assert (cfg.generator.max_batch, cfg.trainer.lr, cfg.run_id) == (64, 5e-4, "123")
    assert not cfg.curriculum and cfg.policy == "divided" and cfg.task == "countdown"
    assert cfg.generator.max_prefill_tokens == RunConfig().generator.max_prefill_tokens
    # a key only one table has needs no table (the issue's `--set lr=5e-4`)
    short = apply_overrides(RunConfig(), ["lr=5e-4", "max_batch=64"])
    assert (short.trainer.lr, short.generator.max_batch) == (5e-4, 64)
    for assignment, message in (
        ("lr=fast", "RunConfig.trainer.lr: expected float, got str"),
        ("num_threads=2", "'num_threads' is ambiguous: say generator.num_threads or "
         "trainer.num_threads"),
        ("itertions=3", "unknown keys ['itertions']; did you mean 'iterations'?"),
        ("generator.max_bach=3", "RunConfig.generator: unknown keys ['max_bach']; did you mean "
         "'max_batch'?"),
        ("trainer.lr=fast", "RunConfig.trainer.lr: expected float, got str"),
        ("iterations=0", "RunConfig.iterations must be >= 1"),
        ("mode=rey", "RunConfig.mode: 'rey' is not one of"),
        ("iterations", "expected KEY=VALUE"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as info:
            apply_overrides(RunConfig(), [assignment])
        assert str(info.value).startswith(f"--set {assignment}") or "'iterations'" in str(
            info.value
        )
        assert message in str(info.value)
    # the same did-you-mean in a TOML file
    with pytest.raises(ConfigError, match=r"unknown keys \['itertions'\]; did you mean"):
        build_options(RunConfig, {"itertions": 3}, "run.toml")


def test_print_config_is_the_resolved_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text("iterations = 7\n[generator]\nmax_batch = 32\n")
    argv = ["run", "--config", str(toml), "--set", "generator.max_batch=64", "--out", "o"]
    assert (
        main([*argv, "--set", "keep_checkpoints=3", "--policy", "divided", "--print-config"]) == 0
    )
    printed = build_options(RunConfig, tomllib.loads(capsys.readouterr().out), "printed")
    assert (printed.iterations, printed.generator.max_batch) == (7, 64)
    assert (printed.keep_checkpoints, printed.policy, printed.out_dir) == (3, "divided", "o")
    assert printed.generator.model.max_context == RunConfig().generator.model.max_context


def test_choices_are_checked_at_parse_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert set(run_cli.RUN_POLICIES) == {p for p in RUN_POLICIES if p}
    assert set(RUN_POLICIES) < {"", *POLICY_NAMES}
    for flag, value in (("--policy", "contxt_aware"), ("--backend", "vllm"), ("--dispatch", "x")):
        code, _, err = exits(["run", flag, value], capsys)
        assert code == 2 and f"argument {flag}: invalid choice: '{value}'" in err
    assert exits(["rollout", "--policy", "fastest"], capsys)[0] == 2
    toml = tmp_path / "run.toml"  # and in a TOML file, before anything starts
    toml.write_text('policy = "contxt_aware"\n')
    assert main(["run", "--config", str(toml)]) == 2
    assert "RunConfig.policy 'contxt_aware' is not one of" in capsys.readouterr().err
    args = build_parser().parse_args(["run", "--policy", "baseline"])
    assert run_cli.run_config(args).policy == "baseline"
