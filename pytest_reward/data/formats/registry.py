"""The samples formats, in one registry: what each recognises, and how to read, count and check it.

Every question about a samples file goes through here: the readers (``sources.read_samples``, ``count_samples``,
``check_dataset``, ``uses_fields``) and the plugin (which paths it collects, which arguments name samples files,
which directories stand for samples files). A file whose name no format claims is read as JSONL, as
``--reward-samples`` accepts any file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import SampleFormatError
from ..samples import Sample, SampleError, keyer, parse_record

__all__ = [
    "FORMATS",
    "DatasetError",
    "SamplesFormat",
    "directory_files",
    "format_for",
    "is_samples_file",
    "record_samples",
    "register_format",
    "suffixes",
    "unregister_format",
]


class DatasetError(Exception):
    """A samples file that cannot be read at all (not Parquet / Arrow, truncated, corrupt, not a pack)."""


def _no_problem(path: Path) -> str | None:
    return None


@dataclass(frozen=True)
class SamplesFormat:
    """One samples format. A file format names its ``suffixes`` and gives ``read`` and ``count``; a directory
    format gives ``files`` only (the samples files, of file formats, that a directory stands for)."""

    name: str
    suffixes: tuple[str, ...] = ()
    """File names it recognises, by their ending (``.jsonl``, ``.jsonl.gz``): the longest match wins."""
    read: Callable[..., Iterator[Sample | SampleError]] | None = None
    """``read(path, *, max_line_bytes, keys, fields)``: the file's samples, streaming, in file order; a row or line
    that is not a sample is a ``SampleError`` naming it."""
    count: Callable[..., int] | None = None
    """``count(path, *, limit)``: how many samples (cheap: lines, or rows from metadata); may stop counting past
    ``limit``; 0 for a file it cannot open."""
    check: Callable[[Path], str | None] = _no_problem
    """Why the file cannot be read at all (naming it), or None: asked before a file is collected."""
    fields: bool = False
    """Whether a field mapping applies to its rows (ini ``reward_sample_fields``, a marker's ``sample_fields=``)."""
    files: Callable[[Path], list[Path] | None] | None = None
    """A directory format: the files a directory stands for, in order; None when it is not one;
    :class:`DatasetError` naming what is missing when it is one but incomplete."""

    def __post_init__(self) -> None:
        if self.files is None and not (self.suffixes and self.read is not None and self.count is not None):
            raise ValueError(f"samples format {self.name!r}: give suffixes, read and count (or files)")
        if self.files is not None and (self.suffixes or self.read is not None):
            raise ValueError(f"samples format {self.name!r}: a directory format gives files only")
        bad = [s for s in self.suffixes if not s.startswith(".") or len(s) < 2]
        if bad:
            raise ValueError(f"samples format {self.name!r}: a suffix starts with a dot, got {bad}")


#: Every registered format, in registration order.
FORMATS: list[SamplesFormat] = []


def register_format(fmt: SamplesFormat) -> SamplesFormat:
    """Add ``fmt``: its files are then read, counted, checked and collected like the built-in formats. A name or a
    suffix another format has is a ``ValueError`` naming both."""
    for other in FORMATS:
        if other.name == fmt.name:
            raise ValueError(f"a samples format named {fmt.name!r} is already registered")
        shared = sorted(set(other.suffixes) & set(fmt.suffixes))
        if shared:
            raise ValueError(
                f"samples format {fmt.name!r}: {', '.join(shared)} already belongs to format {other.name!r}"
            )
    FORMATS.append(fmt)
    return fmt


def unregister_format(name: str) -> SamplesFormat:
    """Remove the format named ``name`` (``KeyError`` when there is none); returns it."""
    for fmt in FORMATS:
        if fmt.name == name:
            FORMATS.remove(fmt)
            return fmt
    raise KeyError(f"no samples format named {name!r}")


def suffixes() -> tuple[str, ...]:
    """Every file suffix a registered format recognises."""
    return tuple(s for fmt in FORMATS for s in fmt.suffixes)


def _claiming(name: str) -> SamplesFormat | None:
    best, size = None, 0
    for fmt in FORMATS:
        for suffix in fmt.suffixes:
            if len(suffix) > size and name.endswith(suffix):
                best, size = fmt, len(suffix)
    return best


def is_samples_file(path: str | os.PathLike[str]) -> bool:
    """Whether a registered format recognises ``path``'s name (the file is not looked at)."""
    return _claiming(str(path)) is not None


def format_for(path: str | os.PathLike[str]) -> SamplesFormat:
    """The format of the file ``path``: the one whose suffix its name ends with (the longest), else JSONL."""
    found = _claiming(str(path))
    if found is not None:
        return found
    return next(fmt for fmt in FORMATS if fmt.name == "jsonl")


def directory_files(directory: str | os.PathLike[str]) -> list[Path] | None:
    """The samples files a directory stands for (a ``datasets`` ``save_to_disk`` directory: its Arrow files), as
    the first directory format that knows it gives them; None when none does. One that is a format's directory
    but lacks a part it lists raises :class:`DatasetError` naming the part."""
    for fmt in FORMATS:
        if fmt.files is not None:
            found = fmt.files(Path(directory))
            if found is not None:
                return found
    return None


def record_samples(
    path: Path, records: Iterable[tuple[int, Any]], *, keys: bool = True, unit: str = "row"
) -> Iterator[Sample | SampleError]:
    """Samples from ``(position, record)`` pairs, each record a JSON-like dict as a JSONL line holds: validated
    (:func:`~pytest_reward.data.samples.parse_record`) and keyed as the built-in readers do. ``unit``: what a
    position counts (``"row"`` or ``"line"``). For a format whose rows are already our records."""
    keyed = keyer(keys)
    for position, value in records:
        try:
            sample = parse_record(value, path, position)
        except SampleFormatError as exc:
            yield SampleError(path, position, str(exc), unit=unit)
            continue
        sample.unit = unit
        try:
            yield keyed(sample)
        except (TypeError, ValueError) as exc:  # a value JSON cannot hold, in a keyed run
            yield SampleError(path, position, f"a value is not JSON-compatible: {exc}", unit=unit)
