"""The prepared GPU check (examples/sglang_gpu_check.py) parses its arguments and builds the
server commands it would launch; running it needs a GPU and SGLang (not in CI)."""

from __future__ import annotations

import pytest

from examples import sglang_gpu_check as script


def test_arguments_parse_into_the_server_commands() -> None:
    args = script.build_parser().parse_args(
        ["--model", "m", "--port", "31000", "--spec", "on", "--server-arg=--tp-size=2"]
    )
    assert script.spec_modes(args) == [True]
    cmd = script.server_command(args, speculative=True)
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    assert cmd[cmd.index("--model-path") + 1] == "m" and "31000" in cmd
    assert cmd[cmd.index("--speculative-algorithm") + 1] == "NGRAM"
    assert cmd[-1] == "--tp-size=2"
    assert "--speculative-algorithm" not in script.server_command(args, speculative=False)


def test_a_dry_run_prints_one_command_per_speculation_mode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert script.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "NGRAM" not in lines[0] and "NGRAM" in lines[1]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit):
        script.build_parser().parse_args(["--spec", "sometimes"])
