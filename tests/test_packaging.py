"""The package as pip builds it: metadata in the current form (no setuptools deprecation warning) and pytest-xdist
among the runtime dependencies, so `-n 2` works in any install, `make demo`'s included."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pytest_reward

ROOT = Path(pytest_reward.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The wheel's METADATA and everything the build printed (built from a copy: no build/ in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_reward", source / "pytest_reward",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))  # fmt: skip
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", str(source), "-w",
         str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("pytest_reward-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return metadata, proc.stdout + proc.stderr


def test_the_build_prints_no_deprecation_warning(built: tuple[str, str]) -> None:
    _metadata, log = built
    assert "SetuptoolsDeprecationWarning" not in log
    assert "License classifiers are deprecated" not in log and "`project.license` as a TOML table" not in log


def test_the_license_is_an_spdx_expression(built: tuple[str, str]) -> None:
    metadata, _log = built
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_pytest_xdist_is_a_runtime_dependency(built: tuple[str, str]) -> None:
    metadata, _log = built
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    runtime = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("pytest-xdist") for r in runtime), runtime
    assert not any(r.startswith(("jax", "torch", "ray", "transformers")) for r in runtime), runtime
