"""The docs stay true: the configuration reference is generated and every field described,
the README stays a front door (<= 250 lines), and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.cli import config_reference

ROOT = Path(__file__).parents[1]
REGENERATE = "python -m pipeline.cli.config_reference > docs/configuration.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_every_config_field_has_a_description() -> None:
    missing = config_reference.undescribed()
    assert not missing, (
        "describe these fields next to them (a `#:` comment above the field, a trailing "
        f"comment, or '`name`: meaning' in the class docstring), then run {REGENERATE}: "
        + ", ".join(missing)
    )


def test_configuration_reference_is_generated() -> None:
    on_disk = (ROOT / "docs" / "configuration.md").read_text()
    assert on_disk == config_reference.render(), f"docs/configuration.md is stale: {REGENERATE}"


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(page.read_text())
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_relative_link_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in relative_links(page):
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_docs_has_the_pages_the_readme_promises() -> None:
    for name in (
        "install",
        "architecture",
        "seer-rollout",
        "speculative-decoding",
        "sglang",
        "earl",
        "simulator",
        "deployment",
        "faults-security",
        "configuration",
        "benchmarks",
    ):
        assert (ROOT / "docs" / f"{name}.md").is_file(), name
