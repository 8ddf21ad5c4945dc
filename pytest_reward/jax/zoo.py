"""Find the example models shipped with pytest-reward by name (``resolve_model("tiny-adder")``)."""

from __future__ import annotations

from pathlib import Path

#: Where :func:`resolve_model` looks, in order: inside the installed package, then a source checkout's examples.
SEARCH_PATH: tuple[Path, ...] = (
    Path(__file__).resolve().parent / "models",
    Path(__file__).resolve().parents[2] / "examples" / "models",
)


def available_models() -> list[str]:
    """Names of the shipped example models."""
    names = {
        p.name
        for root in SEARCH_PATH
        if root.is_dir()
        for p in root.iterdir()
        if (p / "config.json").exists()
    }
    return sorted(names)


def resolve_model(name: str | Path) -> Path:
    """A model directory: an existing directory path is returned as is, a bare name is looked up in
    :data:`SEARCH_PATH` (the package's ``pytest_reward/jax/models/``, then the repository's ``examples/models/``).
    """
    path = Path(name).expanduser()
    if (path / "config.json").exists():
        return path.resolve()
    for root in SEARCH_PATH:
        candidate = root / str(name)
        if (candidate / "config.json").exists():
            return candidate.resolve()
    raise FileNotFoundError(
        f"no model {str(name)!r}: not a directory with config.json, and not a shipped model "
        f"(available: {', '.join(available_models()) or 'none'}; searched {', '.join(map(str, SEARCH_PATH))})"
    )
