"""``datasets.save_to_disk`` directories: a directory that stands for its Arrow files (read by :mod:`.arrow`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .registry import SamplesFormat

__all__ = ["FORMAT", "saved_dataset_files"]


def saved_dataset_files(directory: str | os.PathLike[str]) -> list[Path] | None:
    """The Arrow files of a ``datasets`` ``save_to_disk`` directory: a ``Dataset``'s (``state.json`` lists its
    shards) or a ``DatasetDict``'s (``dataset_dict.json`` lists its splits, each a ``Dataset`` directory), in
    order; None when ``directory`` is not one."""
    directory = Path(directory)
    try:
        if (directory / "dataset_dict.json").is_file():
            splits = json.loads((directory / "dataset_dict.json").read_text())["splits"]
            out: list[Path] = []
            for split in splits:
                out.extend(saved_dataset_files(directory / split) or [])
            return out
        if (directory / "state.json").is_file():
            state = json.loads((directory / "state.json").read_text())
            return [directory / f["filename"] for f in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


FORMAT = SamplesFormat("datasets-saved", files=saved_dataset_files)
