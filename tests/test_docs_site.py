"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page missing from the
nav (or a nav entry without its page), a stale API reference or snippet fails here, in ``make test``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import REPO


def _build(site: Path, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_strict(tmp_path: Path) -> None:
    built = _build(tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "pytest-reward" in index
    # the generated reference pages are there, with the API reference pulled from the docstrings
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "reward_function" in api and "EvaluateResult" in api
    hooks = (tmp_path / "site" / "reference" / "hooks" / "index.html").read_text(encoding="utf-8")
    assert "pytest_reward_run_finished" in hooks
    # nothing is fetched from the network when the pages are read: no remote fonts, scripts or styles
    for page in (tmp_path / "site").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "https://cdn" not in text, page


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        "site_name: t\ndocs_dir: docs\ntheme: {name: material, font: false}\nnav: [index.md]\n", encoding="utf-8"
    )
    built = _build(tmp_path / "site", config)
    assert built.returncode != 0
    assert "missing.md" in built.stdout + built.stderr
