"""Pointing a run at SGLang servers: flags, TOML and the launcher's wait."""

from __future__ import annotations

import tomllib

import pytest

from actors.generator import GeneratorOptions
from actors.generator.sglang import DEFAULT_COMMAND, SGLangOptions
from actors.options import ConfigError
from pipeline.config import PipelineConfig, build_options
from pipeline.launch.backend import server_start_s, use_backend
from pipeline.rl.config import RunConfig
from pipeline.rollout.api import rollout_config


def test_urls_or_a_command_select_the_sglang_backend() -> None:
    attached = use_backend(GeneratorOptions(), urls=["http://a:1", "http://b:2"])
    assert attached.backend == "sglang" and attached.sglang.urls == ("http://a:1", "http://b:2")
    assert attached.sglang.server_url(1) == "http://b:2"
    with pytest.raises(ConfigError, match="one URL per generator"):
        attached.sglang.server_url(2)
    launched = use_backend(GeneratorOptions(), command="seer serve --model {model} --port {port}")
    assert launched.sglang.command == ("seer", "serve", "--model", "{model}", "--port", "{port}")
    assert use_backend(GeneratorOptions(), "sglang").sglang.command == DEFAULT_COMMAND
    assert use_backend(GeneratorOptions()).backend == "builtin"


def test_a_run_toml_maps_onto_the_sglang_options() -> None:
    text = """
[generator]
backend = "sglang"
[generator.sglang]
urls = ["http://10.0.0.5:30000"]
request_timeout_s = 30
"""
    cfg = build_options(RunConfig, tomllib.loads(text), "run.toml")
    assert cfg.generator.backend == "sglang"
    assert cfg.generator.sglang == SGLangOptions(
        urls=("http://10.0.0.5:30000",), request_timeout_s=30.0
    )
    with pytest.raises(ConfigError, match="urls"):
        build_options(RunConfig, tomllib.loads(text.replace("http://", "ftp://")), "run.toml")


def test_the_launcher_waits_for_servers_the_generators_launch() -> None:
    launch = {"backend": "sglang", "sglang": {"start_timeout_s": 300.0}}
    assert server_start_s(launch) == 360.0
    assert rollout_config(generator=launch).ready_timeout_s == 360.0
    short = {"backend": "sglang", "sglang": {"start_timeout_s": 10.0}}  # never below the default
    assert rollout_config(generator=short).ready_timeout_s == PipelineConfig.ready_timeout_s
    attach = {"backend": "sglang", "sglang": {"urls": ["http://a:1"]}}
    assert rollout_config(generator=attach).ready_timeout_s == PipelineConfig.ready_timeout_s
    assert server_start_s({}) == 0.0
