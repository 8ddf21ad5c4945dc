"""Samples from datasets: Parquet files and Hugging Face ``datasets`` saved to disk, read as the same
``Sample | SampleError`` stream as a JSONL file (:func:`read_samples` picks the reader by suffix).

A row becomes a record like a JSONL line, then goes through :func:`samples.parse_record` (one validation for every
format). Which column is what comes from a field mapping (ini ``reward_sample_fields``, ``TARGET=dotted.path``,
dotted paths reaching into structs; a function's marker ``sample_fields={...}`` replaces it for that function, the
file then being read once per distinct mapping), laid over the first preset whose columns the file has:

- ``messages``: the plugin's own schema, as in JSONL;
- verl (``reward_model`` and ``prompt``): ``messages=prompt ground_truth=reward_model.ground_truth``; the other
  columns (``data_source``, ``extra_info``, ``ability``) are passed to the reward function as keywords;
- TRL (``prompt``, optional ``completion``): standard (strings) or conversational (lists of messages).

Targets: ``messages``, ``prompt`` (a string or a list of messages), ``response`` (a string or a list of
messages: the answer to score; absent or null: the sample is prompt-only, rolled out by the model as for JSONL),
``ground_truth``, ``id``, ``expect``; any other target is a keyword argument. Columns the mapping does not consume
are passed as keywords too (``messages`` and ``prompt`` never are).

Memory: Parquet is read one row group at a time (``iter_batches``), Arrow IPC files one record batch at a time,
memory-mapped; a batch's rows are turned into records one by one. Rows count from 1 (``data.parquet:row 1`` is
``ds[0]``). A row whose path is missing or whose value has the wrong type is a ``SampleError`` naming the row;
the other rows still run. A file pyarrow cannot open raises :class:`DatasetError` naming it.

pyarrow is imported only when a dataset is read.
"""

from __future__ import annotations

import collections
import io
import itertools
import json
import math
import os
import pickle
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import SampleFormatError
from ..reward.chat import conversation
from .samples import (
    DEFAULT_MAX_LINE_BYTES,
    NO_GROUND_TRUTH,
    Sample,
    SampleError,
    count_lines,
    iter_samples,
    keyer,
    parse_record,
)

__all__ = [
    "DATASET_SUFFIXES",
    "PACK_SUFFIXES",
    "PRESETS",
    "SUFFIXES",
    "DatasetError",
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

DATASET_SUFFIXES = (".parquet", ".arrow")
PACK_SUFFIXES = (".pt",)
"""slime's debug rollout data (``--save-debug-rollout-data``): a ``torch.save`` of ``{"rollout_id", "samples"}``."""
SUFFIXES = (".jsonl", *DATASET_SUFFIXES, *PACK_SUFFIXES)
_BATCH_ROWS = 4096
_SLICE_ROWS = 64
"""Rows whose values the columnar read holds at once: few enough that they seldom outlive a young garbage
collection (at 1M verl rows: 64 rows, 7 full collections; 256, 15; 1024, 35), many enough that pyarrow's
per-call cost stays small (32 rows is slower again)."""
_TARGETS_NEVER_FORWARDED = ("messages", "prompt")

#: Presets, tried in order: (name, the columns that select it, the mapping).
PRESETS: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("messages", ("messages",), {"messages": "messages"}),
    ("verl", ("prompt", "reward_model"), {"prompt": "prompt", "ground_truth": "reward_model.ground_truth"}),
    ("trl", ("prompt", "completion"), {"prompt": "prompt", "response": "completion"}),
    ("trl", ("prompt",), {"prompt": "prompt"}),
)
#: slime's ``Sample.to_dict()`` (``slime/utils/types.py``): the response is scored against the ``label``; of its other
#: fields only these are passed to the reward function (the rest are tokens, log-probs, routing: training data).
SLIME_PRESET = {"prompt": "prompt", "response": "response", "ground_truth": "label"}
SLIME_FORWARDED = ("index", "group_index", "status", "metadata")


class DatasetError(Exception):
    """A dataset file that cannot be read at all (not Parquet / Arrow, truncated, corrupt)."""


def is_samples_file(path: str | os.PathLike[str]) -> bool:
    return str(path).endswith(SUFFIXES)


def fields_key(fields: dict[str, str]) -> str:
    """A field mapping as a canonical string (equal for equal mappings, whatever their order)."""
    return " ".join(f"{t}={p}" for t, p in sorted(fields.items()))


def uses_fields(path: str | os.PathLike[str]) -> bool:
    """Whether a field mapping applies to ``path`` (a dataset or a slime pack; a JSONL file's keys are its
    fields)."""
    return str(path).endswith((*DATASET_SUFFIXES, *PACK_SUFFIXES))


def parse_fields(entries: Sequence[str], where: str) -> dict[str, str]:
    """``["messages=prompt", "ground_truth=reward_model.ground_truth"]`` → ``{target: path}``; a malformed entry
    raises ``ValueError`` naming ``where``."""
    out: dict[str, str] = {}
    for entry in entries:
        target, eq, path = entry.partition("=")
        target, path = target.strip(), path.strip()
        if not eq or not target or not path or any(not part for part in path.split(".")):
            raise ValueError(
                f"{where}: {entry!r} is not TARGET=column or TARGET=column.field (e.g. "
                "ground_truth=reward_model.ground_truth)"
            )
        if not target.isidentifier():
            raise ValueError(
                f"{where}: target {target!r} is not a name (targets: messages, prompt, response, ground_truth, "
                "id, expect, or a keyword argument of the reward function)"
            )
        if target in out:
            raise ValueError(f"{where}: {target!r} is mapped twice")
        out[target] = path
    if "messages" in out and "prompt" in out:
        raise ValueError(f"{where}: map either 'messages' or 'prompt', not both")
    return out


def read_samples(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    keys: bool = True,
    fields: dict[str, str] | None = None,
) -> Iterator[Sample | SampleError]:
    """The samples of a JSONL, Parquet or Arrow file, streaming, in file order."""
    path = Path(path)
    if path.name.endswith(PACK_SUFFIXES):
        yield from _pack_samples(path, keys=keys, fields=fields)
        return
    if not path.name.endswith(DATASET_SUFFIXES):
        yield from iter_samples(path, max_line_bytes=max_line_bytes, keys=keys)
        return
    keyed = keyer(keys)
    batches, columns = _open(path)
    mapping, problem = _mapping(columns, fields)
    if problem is not None:
        yield SampleError(path, 1, problem, unit="row")
        return
    consumed = {p.split(".", 1)[0] for p in mapping.values()}
    forwarded = [c for c in columns if c not in consumed and c not in _TARGETS_NEVER_FORWARDED]
    forwarded = [c for c in forwarded if c not in mapping]
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
        sample = parse_record(_record(values, mapping, forwarded), path, row)
    except SampleFormatError as exc:
        return SampleError(path, row, str(exc), unit="row")
    sample.unit = "row"
    try:
        return keyed(sample)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:  # a value JSON cannot hold (a timestamp, bytes) in a keyed run
        return SampleError(path, row, f"a value is not JSON-compatible: {exc}", unit="row")


def count_samples(path: str | os.PathLike[str], *, limit: int | None = None) -> int:
    """Number of lines (JSONL), rows (from a dataset's metadata, without reading its data) or a pack's samples."""
    if str(path).endswith(PACK_SUFFIXES):
        try:
            return len(load_pack(Path(path)))
        except DatasetError:
            return 0
    if not str(path).endswith(DATASET_SUFFIXES):
        return count_lines(path, limit=limit)
    try:
        return _row_count(Path(path))
    except DatasetError:
        return 0


def check_dataset(path: str | os.PathLike[str]) -> str | None:
    """None when ``path`` is not a dataset or pyarrow can open it (a slime pack: it loads); else why not (naming
    the file)."""
    if str(path).endswith(PACK_SUFFIXES):
        try:
            load_pack(Path(path))
        except DatasetError as exc:
            return str(exc)
        return None
    if not str(path).endswith(DATASET_SUFFIXES):
        return None
    try:
        _row_count(Path(path))
    except DatasetError as exc:
        return str(exc)
    return None


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


# --- rows → records -----------------------------------------------------------------------------------------


def _mapping(columns: list[str], fields: dict[str, str] | None) -> tuple[dict[str, str], str | None]:
    """The preset whose columns the file has, with the user's ``fields`` over it (mapping ``messages`` replaces
    the preset's ``prompt`` and the other way round); no preset and no fields: why not."""
    preset = next((dict(m) for _, needs, m in PRESETS if all(c in columns for c in needs)), None)
    if preset is None and not fields:
        return {}, (
            f"no preset fits the columns {columns} (verl: prompt + reward_model; TRL: prompt [+ completion]; "
            "or messages); map them with the ini option reward_sample_fields, e.g. messages=conversation "
            "ground_truth=answer"
        )
    mapping = preset or {}
    fields = fields or {}
    if "messages" in fields or "prompt" in fields:
        mapping.pop("messages", None)
        mapping.pop("prompt", None)
    mapping.update(fields)
    return mapping, None


_ABSENT: Any = object()


def _resolve(row: dict[str, Any], path: str) -> Any:
    value: Any = row
    for i, part in enumerate(path.split(".")):
        if not isinstance(value, dict) or part not in value:
            where = ".".join(path.split(".")[:i]) or "the row"
            if i == 0:
                raise SampleFormatError(f"no column {part!r} (columns: {', '.join(row)})")
            if value is None:
                raise SampleFormatError(f"{where} is null, so {path!r} is missing")
            raise SampleFormatError(f"{where} has no field {part!r} (needed for {path!r})")
        value = value[part]
    return value


def _turns(value: Any, what: str) -> Any:
    """A string, or a list of messages as dicts; anything else is a format error naming ``what``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return [{k: v for k, v in m.items() if v is not None or k == "content"} for m in value]
    shown = json.dumps(value, default=str)
    raise SampleFormatError(
        f"{what!r} must be a string or a list of messages, got {shown[:57] + '...' if len(shown) > 60 else shown}"
    )


def _record(row: dict[str, Any], mapping: dict[str, str], forwarded: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {c: row[c] for c in forwarded}
    prompt = response = _ABSENT
    for target, path in mapping.items():
        value = _resolve(row, path)
        if target == "prompt":
            prompt = _turns(value, path)
        elif target == "response":
            response = None if value is None else _turns(value, path)
        elif target == "messages" and isinstance(value, list):
            record["messages"] = _turns(value, path)
        else:
            record[target] = value
    if prompt is not _ABSENT:
        if response is _ABSENT or response is None:
            record["prompt" if isinstance(prompt, str) else "messages"] = prompt
        else:
            record["messages"] = conversation(prompt, response)
    return record


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


# --- slime's debug rollout data ------------------------------------------------------------------------------

#: The pickle of ``torch.save``'s legacy (non-zip) format starts with this number (``torch/serialization.py``).
_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
_PLAIN = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "bytearray"): bytearray,
}
_OPAQUE: dict[str, type] = {}


class Opaque:
    """What a pack holds where it names a class (a tensor, a numpy array, an enum, anything not plain data): a
    stand-in that records the name. The class is never imported and nothing of the file runs."""

    what = "object"

    def __new__(cls, *args: Any, **kwargs: Any) -> Opaque:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{self.what}, not loaded>"


def _opaque(what: str) -> type:
    cls = _OPAQUE.get(what)
    if cls is None:
        cls = _OPAQUE[what] = type("Opaque", (Opaque,), {"what": what})
    return cls


class _PackUnpickler(pickle.Unpickler):
    """Plain data only: dicts, lists, strings, numbers (and ordered dicts, sets); every other global the pickle
    names becomes an :class:`Opaque` placeholder, and torch's tensor storages too (``persistent_load``)."""

    def find_class(self, module: str, name: str) -> Any:
        plain = _PLAIN.get((module, name))
        return plain if plain is not None else _opaque(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        return _opaque("torch storage")()


def _unpickle(data: bytes | io.BufferedIOBase) -> Any:
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    return _PackUnpickler(source).load()


def load_pack(path: Path) -> list[Any]:
    """The ``samples`` of a slime debug rollout pack: ``torch.save({"rollout_id": ..., "samples":
    [Sample.to_dict(), ...]}, path)`` (``slime/observability/rollout_data_utils.py``), read without torch: the zip's
    ``data.pkl`` (or a legacy / plain pickle) through :class:`_PackUnpickler`. :class:`DatasetError` naming the file
    when it is not one."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
                if len(names) != 1:
                    raise DatasetError(f"{path}: not a torch.save file (no data.pkl in the zip)")
                value = _unpickle(zf.read(names[0]))
        else:
            with open(path, "rb") as fh:
                value = _unpickle(fh)
                if value == _TORCH_MAGIC:  # torch's legacy format: magic, protocol, system info, the object
                    _unpickle(fh)
                    _unpickle(fh)
                    value = _unpickle(fh)
    except DatasetError:
        raise
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise DatasetError(
            f"{path}: not a readable slime rollout pack ({type(exc).__name__}: {exc})"
        ) from None
    except Exception as exc:  # a pickle can fail in many ways (a truncated stream, a bad opcode argument)
        raise DatasetError(
            f"{path}: not a readable slime rollout pack ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(value, dict) or not isinstance(value.get("samples"), list):
        shown = sorted(map(str, value)) if isinstance(value, dict) else type(value).__name__
        raise DatasetError(
            f"{path}: not slime debug rollout data (expected a dict with a 'samples' list, as "
            f"--save-debug-rollout-data writes; got {shown})"
        )
    return value["samples"]


def _recorded(reward: Any) -> float | None:
    """The reward slime recorded, when it is one number (a dict reward: read with ``--reward-key`` by slime, not
    replayed here)."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return None
    value = float(reward)
    return value if math.isfinite(value) else None


def _pack_samples(path: Path, *, keys: bool, fields: dict[str, str] | None) -> Iterator[Sample | SampleError]:
    """A slime pack's samples, each as a row: ``prompt`` (a chat-templated string or a list of messages) and
    ``response`` (the text) become the conversation, ``label`` the ground truth, ``reward`` the recorded score;
    ``index``, ``group_index``, ``status`` and ``metadata`` are passed as keywords."""
    keyed = keyer(keys)
    records = load_pack(path)
    mapping = dict(SLIME_PRESET)
    fields = fields or {}
    if "messages" in fields or "prompt" in fields:
        mapping.pop("prompt", None)
    mapping.update(fields)
    consumed = {p.split(".", 1)[0] for p in mapping.values()}
    forwarded = [c for c in SLIME_FORWARDED if c not in consumed and c not in mapping]
    for row, values in enumerate(records, 1):
        if not isinstance(values, dict):
            yield SampleError(path, row, f"sample {row} is {type(values).__name__}, not a dict", unit="row")
            continue
        try:
            record = _record(values, mapping, [c for c in forwarded if c in values])
            for target, value in record.items():
                if isinstance(value, Opaque):
                    raise SampleFormatError(f"{target!r} is {value!r}: not plain data")
            sample = parse_record(record, path, row)
        except SampleFormatError as exc:
            yield SampleError(path, row, str(exc), unit="row")
            continue
        sample.unit = "row"
        sample.recorded = _recorded(values.get("reward"))
        try:
            yield keyed(sample)
        except (
            TypeError,
            ValueError,
        ) as exc:  # a placeholder (a tensor) inside a forwarded field, in a keyed run
            yield SampleError(path, row, f"a value is not JSON-compatible: {exc}", unit="row")
