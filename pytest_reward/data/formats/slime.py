"""slime's debug rollout data (``--save-debug-rollout-data``): a ``torch.save`` of ``{"rollout_id", "samples"}``,
read without torch and without running anything of the file; each sample is a row, mapped with slime's preset
(:mod:`pytest_reward.trainers.slime`) and the field mapping (:mod:`..fields`).

What a pack costs is bounded by its size, though a pickle can name one object from many places: 500 bytes can
hold a list of ten copies of a list of ten copies of ... (a "billion laughs"), cheap to unpickle but a billion
values to anything that walks it as a tree (hashing, JSON, copies). Before a sample is used, the columns it reads
are measured with shared objects counted at every place they appear, without expanding them
(:func:`_expanded_size`): a sample over the per-sample cap (ini ``reward_max_line_bytes``, as for a JSONL line),
nested deeper than :data:`~..samples.MAX_DEPTH` or holding itself is an error for that row. The unpickler builds
only plain values from what the file holds (``bytearray(n)``, an allocation the file does not hold, is refused).
"""

from __future__ import annotations

import collections
import io
import itertools
import math
import os
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import SampleFormatError
from ..fields import record
from ..samples import DEFAULT_MAX_LINE_BYTES, MAX_DEPTH, Sample, SampleError, keyer, parse_record
from .registry import DatasetError, SamplesFormat

__all__ = ["FORMAT", "Opaque", "load_pack"]

#: The pickle of ``torch.save``'s legacy (non-zip) format starts with this number (``torch/serialization.py``).
_TORCH_MAGIC = 0x1950A86A20F9469CFC6C


def _bytearray(*args: Any) -> bytearray:
    """``bytearray`` from the bytes the file holds (how pickle writes one); never ``bytearray(n)``, which would
    allocate ``n`` bytes the file does not hold."""
    if args and not isinstance(args[0], (bytes, bytearray, str)):
        raise pickle.UnpicklingError(f"bytearray({type(args[0]).__name__}) is not plain data")
    return bytearray(*args)


_PLAIN = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "bytearray"): _bytearray,
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


_CONTAINERS = (dict, list, tuple, set, frozenset)
_END: Any = object()


def _leaf_size(value: Any) -> int:
    """At least how many bytes ``value`` (not a container) takes as JSON."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value) + 2
    return 4 if value is None or isinstance(value, bool) else 1


def _items(value: Any) -> Iterator[Any]:
    return itertools.chain.from_iterable(value.items()) if isinstance(value, dict) else iter(value)


def _expanded_size(value: Any, limit: int, memo: dict[int, tuple[int, int]]) -> int | str:
    """At least how many bytes ``value`` takes as JSON, an object counted at every place it appears; or why it
    cannot be written at all ("holds itself", "nested deeper ..."). Time: one visit per object (``memo``: size and
    height of each container measured, by id), whatever the expanded size; stops once past ``limit``."""
    if not isinstance(value, _CONTAINERS):
        return _leaf_size(value)
    # one frame per open container: [container, its children, size so far, tallest child]
    frames: list[list[Any]] = [[value, _items(value), 1 + 2 * len(value), 0]]
    open_ids = {id(value)}
    while frames:
        top = frames[-1]
        child = next(top[1], _END)
        if child is _END:  # measured: its size and height go to its parent
            frames.pop()
            open_ids.discard(id(top[0]))
            size, height = memo[id(top[0])] = (top[2], top[3] + 1)
            if not frames:
                return int(size)
        elif not isinstance(child, _CONTAINERS):
            size, height = _leaf_size(child), 0
        elif id(child) in open_ids:
            return "holds itself (a container inside its own contents)"
        elif id(child) in memo:  # met before: its size again, not a second visit
            size, height = memo[id(child)]
            if len(frames) + height > MAX_DEPTH:
                return f"is nested more than {MAX_DEPTH} levels deep"
        elif len(frames) >= MAX_DEPTH:
            return f"is nested more than {MAX_DEPTH} levels deep"
        else:
            frames.append([child, _items(child), 1 + 2 * len(child), 0])
            open_ids.add(id(child))
            continue
        parent = frames[-1]
        parent[2] += size
        parent[3] = max(parent[3], height)
        if parent[2] > limit:  # the open containers' sizes only grow: the whole is past it too
            return int(parent[2])
    raise AssertionError("unreachable")  # pragma: no cover


def _too_large(values: dict[str, Any], columns: list[str], limit: int) -> str | None:
    """Why the ``columns`` a sample reads cannot be used (over ``limit`` bytes as JSON, a shared object counted at
    each place; holding itself; too deep), naming the column; None when they can."""
    memo: dict[int, tuple[int, int]] = {}
    total = 0
    for column in columns:
        size = _expanded_size(values[column], limit - total, memo)
        if isinstance(size, str):
            return f"{column!r} {size}"
        total += size
        if total > limit:
            return (
                f"{column!r} expands to more than {_mib(limit)} as JSON (an object named from many places counts "
                f"at each), over the per-sample cap of {_mib(limit)} (ini reward_max_line_bytes)"
            )
    return None


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


def _pack_samples(
    path: Path, *, keys: bool, fields: dict[str, str] | None, max_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Sample | SampleError]:
    """A slime pack's samples, each as a row: ``prompt`` (a chat-templated string or a list of messages) and
    ``response`` (the text) become the conversation, ``label`` the ground truth, ``reward`` the recorded score;
    ``index``, ``group_index``, ``status`` and ``metadata`` are passed as keywords. A sample whose columns read
    take more than ``max_bytes`` as JSON is an error for its row (:func:`_too_large`)."""
    # trainers/ imports pydantic: only once a pack is read, never when the plugin loads
    from ...trainers import slime

    keyed = keyer(keys)
    records = load_pack(path)
    mapping = dict(slime.PRESET)
    fields = fields or {}
    if "messages" in fields or "prompt" in fields:
        mapping.pop("prompt", None)
    mapping.update(fields)
    consumed = {p.split(".", 1)[0] for p in mapping.values()}
    forwarded = [c for c in slime.FORWARDED if c not in consumed and c not in mapping]
    for row, values in enumerate(records, 1):
        if not isinstance(values, dict):
            yield SampleError(path, row, f"sample {row} is {type(values).__name__}, not a dict", unit="row")
            continue
        read = [c for c in dict.fromkeys((*consumed, *forwarded)) if c in values]
        problem = _too_large(values, read, max_bytes)
        if problem is not None:
            yield SampleError(path, row, problem, unit="row")
            continue
        try:
            mapped = record(values, mapping, [c for c in forwarded if c in values])
            for target, value in mapped.items():
                if isinstance(value, Opaque):
                    raise SampleFormatError(f"{target!r} is {value!r}: not plain data")
            sample = parse_record(mapped, path, row)
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


def _read(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    keys: bool = True,
    fields: dict[str, str] | None = None,
) -> Iterator[Sample | SampleError]:
    return _pack_samples(Path(path), keys=keys, fields=fields, max_bytes=max_line_bytes)


def _count(path: str | os.PathLike[str], *, limit: int | None = None) -> int:
    try:
        return len(load_pack(Path(path)))
    except DatasetError:
        return 0


def _check(path: Path) -> str | None:
    """Why ``path`` is not a slime pack (naming it), or None: it loads."""
    try:
        load_pack(Path(path))
    except DatasetError as exc:
        return str(exc)
    return None


FORMAT = SamplesFormat("slime-pack", suffixes=(".pt",), read=_read, count=_count, check=_check, fields=True)
