"""JSONL: one sample per line (the reader is :mod:`pytest_reward.data.samples`). A verl rollout dump is JSONL too:
its rows are recognised line by line (:func:`~pytest_reward.data.samples.parse_record`), and so are the lines of
TRL's schema; a field mapping applies to the lines as to a dataset's rows."""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..samples import DEFAULT_MAX_LINE_BYTES, Sample, SampleError, count_lines, iter_samples
from .registry import SamplesFormat

__all__ = ["FORMAT"]


def _read(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    keys: bool = True,
    fields: dict[str, str] | None = None,
) -> Iterator[Sample | SampleError]:
    return iter_samples(path, max_line_bytes=max_line_bytes, keys=keys, fields=fields)


FORMAT = SamplesFormat("jsonl", suffixes=(".jsonl",), read=_read, count=count_lines, fields=True)
