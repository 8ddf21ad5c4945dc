"""Parquet and Arrow IPC files (what ``datasets.save_to_disk`` writes, too), read as the same ``Sample |
SampleError`` stream as a JSONL file; which column is what comes from a field mapping (:mod:`..fields`).

Memory: Parquet is read one row group at a time (``iter_batches``), Arrow IPC files one record batch at a time,
memory-mapped; a batch's rows are turned into records one by one. Rows count from 1 (``data.parquet:row 1`` is
``ds[0]``). A row whose path is missing or whose value has the wrong type is a ``SampleError`` naming the row;
the other rows still run. A file pyarrow cannot open raises :class:`DatasetError` naming it.

pyarrow is imported only when a file is read.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import SampleFormatError
from ..fields import forwarded_columns, mapping_for, record
from ..preference import PAIR_FIELDS
from ..samples import DEFAULT_MAX_LINE_BYTES, NO_GROUND_TRUTH, Sample, SampleError, keyer, parse_record
from .registry import DatasetError, SamplesFormat

__all__ = ["ARROW", "PARQUET", "SUFFIXES", "read_dataset"]

SUFFIXES = (".parquet", ".arrow")
_BATCH_ROWS = 4096
_SLICE_ROWS = 64
"""Rows whose values the columnar read holds at once: few enough that they seldom outlive a young garbage
collection (at 1M verl rows: 64 rows, 7 full collections; 256, 15; 1024, 35), many enough that pyarrow's
per-call cost stays small (32 rows is slower again)."""


def read_dataset(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    keys: bool = True,
    fields: dict[str, str] | None = None,
) -> Iterator[Sample | SampleError]:
    """The samples of a Parquet or Arrow file, streaming, in file order (``max_line_bytes``: unused)."""
    path = Path(path)
    keyed = keyer(keys)
    batches, columns = _open(path)
    if any(c in PAIR_FIELDS for c in columns):  # preference pairs: each row is read as a JSONL line is
        row = 0
        for batch in batches:
            for values in batch.to_pylist():
                row += 1
                yield _pair_row(values, path, row, keyed)
        return
    mapping, problem = mapping_for(columns, fields)
    if problem is not None:
        yield SampleError(path, 1, problem, unit="row")
        return
    forwarded = forwarded_columns(columns, mapping)
    row = 0
    plans: dict[Any, _Plan | None] = {}
    for batch in batches:
        schema = batch.schema
        plan = (
            plans[schema] if schema in plans else plans.setdefault(schema, _plan(schema, mapping, forwarded))
        )
        if plan is None:
            for values in batch.to_pylist():
                row += 1
                yield _row_sample(values, mapping, forwarded, path, row, keyed)
        else:
            # a few rows' values at a time (_SLICE_ROWS)
            for start in range(0, batch.num_rows, _SLICE_ROWS):
                piece = batch.slice(start, _SLICE_ROWS)
                yield from plan.samples(piece, path, row, keyed)
                row += piece.num_rows


def _row_sample(
    values: dict[str, Any], mapping: dict[str, str], forwarded: list[str], path: Path, row: int, keyed: Any
) -> Sample | SampleError:
    """One row (a dict of its columns) as a sample, or the ``SampleError`` naming it."""
    try:
        sample = parse_record(record(values, mapping, forwarded), path, row)
    except SampleFormatError as exc:
        return SampleError(path, row, str(exc), unit="row")
    sample.unit = "row"
    try:
        return keyed(sample)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:  # a value JSON cannot hold (a timestamp, bytes) in a keyed run
        return SampleError(path, row, f"a value is not JSON-compatible: {exc}", unit="row")


def _pair_row(values: dict[str, Any], path: Path, row: int, keyed: Any) -> Sample | SampleError:
    """A row of a preference dataset (``prompt`` / ``chosen`` / ``rejected`` / ``subset`` ...): its null columns
    are absent fields (a dataset's rows share one schema: a column one row lacks is null there)."""
    values = {k: v for k, v in values.items() if v is not None}
    try:
        sample = parse_record(values, path, row)
    except SampleFormatError as exc:
        return SampleError(path, row, str(exc), unit="row")
    sample.unit = "row"
    try:
        return keyed(sample)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        return SampleError(path, row, f"a value is not JSON-compatible: {exc}", unit="row")


def _count(path: str | os.PathLike[str], *, limit: int | None = None) -> int:
    try:
        return _row_count(Path(path))
    except DatasetError:
        return 0


def _check(path: Path) -> str | None:
    """Why pyarrow cannot open ``path`` (naming it), or None."""
    try:
        _row_count(Path(path))
    except DatasetError as exc:
        return str(exc)
    return None


# --- reading ------------------------------------------------------------------------------------------------


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as exc:
        raise DatasetError(
            "reading Parquet / Arrow samples needs pyarrow: pip install 'pytest-reward[data]'"
        ) from exc
    return pyarrow


def _row_count(path: Path) -> int:
    pa = _pyarrow()
    try:
        if path.suffix == ".parquet":
            return int(pa.parquet.ParquetFile(path).metadata.num_rows)
        with pa.memory_map(str(path)) as source:
            return sum(b.num_rows for b in _ipc_reader(pa, source))
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: not a readable {path.suffix[1:]} file ({exc})") from None


def _ipc_reader(pa: Any, source: Any) -> Any:
    """An Arrow IPC file (random access) or stream (what ``datasets.save_to_disk`` writes) as record batches."""
    try:
        reader = pa.ipc.open_file(source)
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        source.seek(0)
        return iter(pa.ipc.open_stream(source))


def _open(path: Path) -> tuple[Iterator[Any], list[str]]:
    """(record batches, top-level column names); a corrupt file raises ``DatasetError`` naming it."""
    pa = _pyarrow()
    try:
        if path.suffix == ".parquet":
            pf = pa.parquet.ParquetFile(path)
            return _guard(pa, path, pf.iter_batches(batch_size=_BATCH_ROWS)), list(pf.schema_arrow.names)
        source = pa.memory_map(str(path))
        batches = _ipc_reader(pa, source)
        first = next(batches, None)
        if first is None:
            return iter(()), []
        return _guard(pa, path, _chain(first, batches)), list(first.schema.names)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: not a readable {path.suffix[1:]} file ({exc})") from None


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _guard(pa: Any, path: Path, batches: Iterator[Any]) -> Iterator[Any]:
    try:
        yield from batches
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: not a readable {path.suffix[1:]} file ({exc})") from None


# --- batches → samples, column by column ---------------------------------------------------------------------

#: Names a record may hold that :func:`samples.parse_record` reads specially: a batch whose mapping or forwarded
#: columns include one of them is read row by row.
_ROW_BY_ROW = frozenset(("messages", "id", "expect", "ground_truth_for_eval", "input", "output"))
#: Mapping targets a columnar plan reads as columns of their own; every other target is a keyword argument.
_ROW_TARGETS = frozenset(("prompt", "response", "ground_truth"))


class _Plan:
    """How the batches of one schema become samples without a dict per row: each mapped path read as one column
    (``reward_model.ground_truth`` as the struct's child array, resolved once per batch), the usual row (a prompt
    of plain ``{role, content}`` messages, a response that is text) validated once and built directly, as
    :func:`_row_sample` would build it. Any other row (a null struct on a path, a message that is not the usual
    one, a response that may be JSON messages) goes through :func:`_row_sample`, so its sample or its error is
    exactly the row path's."""

    __slots__ = ("forwarded", "mapping", "names", "paths", "truth")

    def __init__(self, mapping: dict[str, str], forwarded: list[str], paths: dict[str, list[str]]) -> None:
        self.mapping = mapping
        self.forwarded = forwarded
        self.paths = paths
        self.truth = "ground_truth" in mapping
        #: The keyword arguments in the order the row path gives them: forwarded columns, then keyword targets.
        self.names = [*forwarded, *(t for t in mapping if t not in _ROW_TARGETS)]

    def samples(self, batch: Any, path: Path, start: int, keyed: Any) -> Iterator[Sample | SampleError]:
        columns: dict[str, list[Any]] = {}
        keywords = {c: batch.column(c) for c in self.forwarded}  # the keyword arguments' arrays
        odd: set[int] = set()  # rows read as rows: a struct on a mapped path is null there
        for target, parts in self.paths.items():
            array = batch.column(parts[0])
            for part in parts[1:]:
                if array.null_count:
                    odd.update(i for i, null in enumerate(array.is_null().to_pylist()) if null)
                array = array.field(part)
            if target in _ROW_TARGETS:
                columns[target] = array.to_pylist()
            else:
                keywords[target] = array
        n = batch.num_rows
        names = self.names
        if names:  # each row's keyword arguments as a dict (built by pyarrow), keys in the row path's order
            pa = _pyarrow()
            kwargs_of = pa.StructArray.from_arrays([keywords[c] for c in names], names=names).to_pylist()
        else:
            kwargs_of = [{} for _ in range(n)]
        responses = columns.get("response") or itertools.repeat(None, n)
        truths = columns["ground_truth"] if self.truth else itertools.repeat(None, n)
        roles: set[str] = set()  # roles already checked (non-empty, not blank)
        mapping, forwarded, truth = self.mapping, self.forwarded, self.truth
        # a run that stores no per-sample data: each sample made with the empty key (what keyer(False) gives it)
        keyless = keyed is keyer(False)
        for i, prompt, response, ground_truth, kwargs in zip(
            range(n), columns["prompt"], responses, truths, kwargs_of, strict=True
        ):
            usual = prompt.__class__ is list and bool(prompt) and i not in odd
            if usual:
                for m in prompt:  # fresh dicts from pyarrow: the sample owns them
                    if m.__class__ is not dict or len(m) != 2:
                        usual = False
                        break
                    role, content = m.get("role"), m.get("content")
                    if role.__class__ is not str or content.__class__ is not str:
                        usual = False
                        break
                    if role not in roles:
                        if not role or role.isspace():
                            usual = False
                            break
                        roles.add(role)
            if usual and response is not None:
                if response.__class__ is not str or response.lstrip()[:1] == "[":  # maybe JSON messages
                    usual = False
                else:
                    prompt.append({"role": "assistant", "content": response})
            row = start + i + 1
            if not usual:
                yield _row_sample(batch.slice(i, 1).to_pylist()[0], mapping, forwarded, path, row, keyed)
                continue
            record = kwargs.copy()
            record["messages"] = prompt
            if truth:
                record["ground_truth"] = ground_truth
            else:  # the sample has no ground truth (the field's default)
                ground_truth = NO_GROUND_TRUTH
            if keyless:  # positional: ..., kwargs, record, _key, _response, recorded, unit
                yield Sample(
                    path, row, None, prompt, None, ground_truth, None, kwargs, record, "", None, None, "row"
                )
                continue
            sample = Sample(path, row, None, prompt, None, ground_truth, None, kwargs, record, unit="row")
            try:
                yield keyed(sample)
            except (TypeError, ValueError) as exc:  # a value JSON cannot hold, in a keyed run
                yield SampleError(path, row, f"a value is not JSON-compatible: {exc}", unit="row")


def _plan(schema: Any, mapping: dict[str, str], forwarded: list[str]) -> _Plan | None:
    """The columnar plan for batches of ``schema``; None when they are read row by row: the mapping has no
    ``prompt``, a name :func:`samples.parse_record` reads specially is involved, a column name repeats, or a mapped
    path is not a chain of struct fields of the schema (each row then gets the row path's error)."""
    names = schema.names
    if "prompt" not in mapping or len(set(names)) != len(names):
        return None
    if any(t in _ROW_BY_ROW for t in mapping) or any(c in _ROW_BY_ROW for c in forwarded):
        return None
    pa = _pyarrow()
    paths: dict[str, list[str]] = {}
    for target, dotted in mapping.items():
        parts = dotted.split(".")
        if parts[0] not in names:
            return None
        kind = schema.field(parts[0]).type
        for part in parts[1:]:
            if not pa.types.is_struct(kind) or kind.get_field_index(part) < 0:
                return None
            kind = kind.field(part).type
        paths[target] = parts
    return _Plan(mapping, forwarded, paths)


PARQUET = SamplesFormat(
    "parquet", suffixes=(".parquet",), read=read_dataset, count=_count, check=_check, fields=True
)
ARROW = SamplesFormat(
    "arrow", suffixes=(".arrow",), read=read_dataset, count=_count, check=_check, fields=True
)
