"""Installing the plugin must not slow down or change unrelated pytest runs."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys, pytest
code = pytest.main(["-q", "-p", "no:cacheprovider", {target!r}])
heavy = sorted(m for m in ("jax", "numpy", "pydantic", "rich", "pytest_reward.reward.models") if m in sys.modules)
print("HEAVY", heavy)
print("PLUGIN", "pytest_reward.plugin" in sys.modules)
sys.exit(code)
"""


def test_unrelated_run_imports_nothing_heavy(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(target=str(tmp_path))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "HEAVY []" in out.stdout, out.stdout
    assert "PLUGIN True" in out.stdout  # the plugin was loaded (entry point), it just stayed idle


def test_importing_the_package_is_light():
    code = "import sys, pytest_reward, pytest_reward.plugin; print(sorted(m for m in ('jax','numpy','pydantic','rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_collect_only_of_a_reward_project_does_not_import_jax(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "rewards.py").write_text(
        "from pytest_reward import reward_function\n\n@reward_function\ndef f(messages, **kw):\n    return {'score': 1.0}\n"
    )
    (tmp_path / "s.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'
    )
    code = (
        "import sys, pytest; c = pytest.main(['-q', '-p', 'no:cacheprovider', '--collect-only', '--reward-samples', 's.jsonl']);"
        "print('JAX', 'jax' in sys.modules); sys.exit(c)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "JAX False" in out.stdout
