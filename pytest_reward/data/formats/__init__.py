"""Samples formats, one module each, registered in :mod:`.registry` (the one place every reader and the plugin
ask): JSONL (:mod:`.jsonl`), Parquet and Arrow files (:mod:`.arrow`), ``datasets.save_to_disk`` directories
(:mod:`.saved`), slime rollout packs (:mod:`.slime`). Another format: a module declaring a :class:`SamplesFormat`,
added with :func:`register_format` (here for a built-in one)."""

from __future__ import annotations

from . import arrow, jsonl, saved, slime
from .registry import (
    FORMATS,
    DatasetError,
    SamplesFormat,
    directory_files,
    format_for,
    is_samples_file,
    record_samples,
    register_format,
    suffixes,
    unregister_format,
)

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

for _builtin in (jsonl.FORMAT, arrow.PARQUET, arrow.ARROW, slime.FORMAT, saved.FORMAT):
    register_format(_builtin)
