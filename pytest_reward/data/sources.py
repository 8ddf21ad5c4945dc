"""Samples from any registered format (:mod:`.formats`), read as one ``Sample | SampleError`` stream: a JSONL
file, a Parquet or Arrow file, a ``datasets.save_to_disk`` directory's files, a slime rollout pack.

Every function here asks the format registry which format a path is (:func:`.formats.format_for`: by its name's
suffix; a name no format claims is read as JSONL). A row of a dataset or pack becomes a record like a JSONL line,
then goes through :func:`samples.parse_record` (one validation for every format); which column is what comes from a
field mapping (:mod:`.fields`: ini ``reward_sample_fields``, a marker's ``sample_fields=``, over the first preset
whose columns the file has: ours, verl's, TRL's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .fields import fields_key, parse_fields, presets
from .formats import DatasetError, format_for, is_samples_file
from .formats.arrow import SUFFIXES as DATASET_SUFFIXES
from .formats.saved import saved_dataset_files
from .formats.slime import Opaque, load_pack
from .samples import DEFAULT_MAX_LINE_BYTES, Sample, SampleError

__all__ = [
    "DATASET_SUFFIXES",
    "PACK_SUFFIXES",
    "SUFFIXES",
    "DatasetError",
    "Opaque",
    "check_dataset",
    "count_samples",
    "fields_key",
    "is_samples_file",
    "load_pack",
    "parse_fields",
    "read_samples",
    "saved_dataset_files",
    "uses_fields",
]

PACK_SUFFIXES = (".pt",)
"""slime's debug rollout data (``--save-debug-rollout-data``): a ``torch.save`` of ``{"rollout_id", "samples"}``."""
SUFFIXES = (".jsonl", *DATASET_SUFFIXES, *PACK_SUFFIXES)
"""The built-in formats' suffixes (:func:`is_samples_file` also knows the formats registered since)."""


def __getattr__(name: str) -> Any:
    # PRESETS, SLIME_PRESET, SLIME_FORWARDED: declared in trainers/, which this module does not import (pydantic)
    if name == "PRESETS":
        return presets()
    if name in ("SLIME_PRESET", "SLIME_FORWARDED"):
        from ..trainers import slime

        return dict(slime.PRESET) if name == "SLIME_PRESET" else slime.FORWARDED
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def uses_fields(path: str | os.PathLike[str]) -> bool:
    """Whether a field mapping applies to ``path`` (every built-in file format: JSONL, a dataset, a slime pack)."""
    return format_for(path).fields


def read_samples(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    keys: bool = True,
    fields: dict[str, str] | None = None,
) -> Iterator[Sample | SampleError]:
    """The samples of a file of any registered format, streaming, in file order."""
    read = format_for(path).read
    assert read is not None  # a file format always reads
    return read(Path(path), max_line_bytes=max_line_bytes, keys=keys, fields=fields)


def count_samples(path: str | os.PathLike[str], *, limit: int | None = None) -> int:
    """Number of lines (JSONL), rows (from a dataset's metadata, without reading its data) or a pack's samples."""
    count = format_for(path).count
    assert count is not None  # a file format always counts
    return count(Path(path), limit=limit)


def check_dataset(path: str | os.PathLike[str]) -> str | None:
    """None when ``path``'s format can open it (JSONL: always; a dataset: pyarrow opens it; a slime pack: it
    loads); else why not (naming the file)."""
    return format_for(path).check(Path(path))
