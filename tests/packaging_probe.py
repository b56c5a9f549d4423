"""Run by tests/test_packaging.py and tests/test_wheel.py in a child interpreter (`python -P
THIS OUT_DIR [--block-extras]`): a tiny in-process rollout through the package roots' public
names, then one JSON line of what it saw. `--block-extras` makes every extra's package
unimportable first (`sys.modules[name] = None`: `import` fails and `find_spec` says None, as
for a package that is not installed)."""

from __future__ import annotations

import importlib
import json
import sys

# every extra's top-level packages (pyproject.toml), and httpx (the tests' client only)
BLOCKED = (
    "starlette", "uvicorn", "matplotlib", "aiohttp", "ray", "sglang_router", "wandb",
    "tensorboard", "reasoning_gym", "transformers", "tokenizers", "httpx", "msgspec",
)  # fmt: skip
TINY = {
    "model": {
        "hidden": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
        "intermediate": 128, "max_context": 256,
    },
    "max_batch": 8,
    "kv_budget_tokens": 2048,
}  # fmt: skip


def missing_extra(module: str, attr: str, *args: object) -> str:
    """The `MissingExtraError` message that calling `module.attr(*args)` (or importing
    `module` when `attr` is empty) raises, or "" when it raises none."""
    from actors.extras import MissingExtraError

    try:
        target = importlib.import_module(module)
        if attr:
            getattr(target, attr)(*args)
    except MissingExtraError as exc:
        return str(exc)
    return ""


async def rollout(out_dir: str) -> dict[str, object]:
    import structlog.testing

    from pipeline import Rollout, SamplingSpec, rollout_config

    config = rollout_config(num_generators=1, generator=TINY, run_dir=out_dir)
    sampling = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=5)
    with structlog.testing.capture_logs() as logs:
        async with Rollout(config, mode="inprocess") as r:
            result = await r.generate_with_record([[5, 6, 7]], group_size=2, sampling=sampling)
    saved = result.save(out_dir)
    return {
        "num_tokens": [len(s.token_ids) for s in result.groups[0].samples],
        "saved": sorted(saved),
        "suffix_tree_core": [e.get("impl") for e in logs if e["event"] == "suffix_tree_core"],
    }


def main() -> None:
    out_dir = sys.argv[1]
    if "--block-extras" in sys.argv:
        for name in BLOCKED:
            sys.modules[name] = None  # type: ignore[assignment]
    import anyio

    import actors.drafts
    import pipeline

    report = anyio.run(rollout, out_dir)
    report["pipeline_file"] = pipeline.__file__
    report["have_compiled_core"] = actors.drafts.HAVE_COMPILED_CORE
    if "--block-extras" in sys.argv:
        from pipeline.records.plot import PLOT_HINT, can_plot

        report["can_plot"] = can_plot()
        report["plot_hint"] = PLOT_HINT
        report["missing"] = {
            "serve": missing_extra("pipeline.serve", ""),
            "plot": missing_extra("pipeline.records.plot", "plot_timeline", {"x": None}, "x"),
            "sglang": missing_extra("actors.generator.options", "_sglang", None, 0),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
