"""``datasets.save_to_disk`` directories: a directory that stands for its Arrow files (read by :mod:`.arrow`).

A directory that says it is one (``dataset_dict.json`` or ``state.json``) but lacks a part it lists (a split, a
split's ``state.json``, a shard) is a :class:`DatasetError` naming the part: scoring the rest would pass a run on
part of the data without a word."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .registry import DatasetError, SamplesFormat

__all__ = ["FORMAT", "saved_dataset_files"]


def saved_dataset_files(directory: str | os.PathLike[str]) -> list[Path] | None:
    """The Arrow files of a ``datasets`` ``save_to_disk`` directory: a ``Dataset``'s (``state.json`` lists its
    shards) or a ``DatasetDict``'s (``dataset_dict.json`` lists its splits, each a ``Dataset`` directory), in
    order; None when ``directory`` is not one. A missing or unreadable part raises :class:`DatasetError`."""
    directory = Path(directory)
    if (directory / "dataset_dict.json").is_file():
        splits = _listed(directory / "dataset_dict.json", "splits")
        for split in splits:
            if not isinstance(split, str) or not split or Path(split).name != split:
                raise DatasetError(f"{directory / 'dataset_dict.json'}: {split!r} is not a split name")
        present = [s for s in splits if (directory / s / "state.json").is_file()]
        for split in splits:
            if split not in present:
                part = directory / split
                lacks = "is missing" if not part.is_dir() else "has no state.json"
                others = " ".join(str(directory / s) for s in present)
                raise DatasetError(
                    f"{directory}: split {split!r} (listed in dataset_dict.json) {lacks} ({part})"
                    + (f"; to score only the others, name them: {others}" if present else "")
                )
        return [f for s in splits for f in _shards(directory / s, f"{directory}: split {s!r}")]
    if (directory / "state.json").is_file():
        return _shards(directory, str(directory))
    return None


def _listed(path: Path, key: str) -> list[Any]:
    """The list under ``key`` in the JSON file ``path``; :class:`DatasetError` naming it when there is none."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))[key]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(
            f"{path}: not a datasets save_to_disk file ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(value, list):
        raise DatasetError(f"{path}: {key!r} is not a list")
    return value


def _shards(directory: Path, where: str) -> list[Path]:
    """The shards a ``Dataset`` directory's ``state.json`` lists, each checked to exist."""
    state = directory / "state.json"
    out = []
    for entry in _listed(state, "_data_files"):
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or Path(name).name != name:
            raise DatasetError(f"{state}: {entry!r} is not a shard entry ({{'filename': ...}})")
        shard = directory / name
        if not shard.is_file():
            raise DatasetError(f"{where}: shard {name} (listed in {state}) is missing")
        out.append(shard)
    return out


FORMAT = SamplesFormat("datasets-saved", files=saved_dataset_files)
