"""slime's debug rollout data (``--save-debug-rollout-data``): a ``torch.save`` of ``{"rollout_id", "samples"}``,
read without torch and without running anything of the file; each sample is a row, mapped with slime's preset
(:mod:`pytest_reward.trainers.slime`) and the field mapping (:mod:`..fields`)."""

from __future__ import annotations

import collections
import io
import math
import os
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import SampleFormatError
from ..fields import record
from ..samples import DEFAULT_MAX_LINE_BYTES, Sample, SampleError, keyer, parse_record
from .registry import DatasetError, SamplesFormat

__all__ = ["FORMAT", "Opaque", "load_pack"]

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
    return _pack_samples(Path(path), keys=keys, fields=fields)


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
