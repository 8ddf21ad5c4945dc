"""Field mappings: which column of a row is what, for the formats whose rows are not our own records (Parquet,
Arrow, trainer packs, and the JSONL lines of a trainer's schema or read with a mapping).

A mapping is ``{target: dotted.path}`` (ini ``reward_sample_fields``, ``TARGET=dotted.path``; a function's marker
``sample_fields={...}`` replaces it for that function), laid over the first preset whose columns the file has:
ours (``messages``), then the trainers' (:mod:`pytest_reward.trainers.verl`, :mod:`pytest_reward.trainers.trl`).

Targets: ``messages``, ``prompt`` (a string or a list of messages), ``response`` (a string or a list of messages:
the answer to score; absent or null: the sample is prompt-only), ``ground_truth``, ``id``, ``expect``; any other
target is a keyword argument. Columns the mapping does not consume are passed as keywords too (``messages`` and
``prompt`` never are). A row becomes a record like a JSONL line (:func:`record`), which
:func:`~pytest_reward.data.samples.parse_record` validates.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import SampleFormatError
from ..reward.chat import conversation

__all__ = [
    "TARGETS_NEVER_FORWARDED",
    "fields_key",
    "forwarded_columns",
    "map_row",
    "mapping_for",
    "parse_fields",
    "presets",
    "record",
]

TARGETS_NEVER_FORWARDED = ("messages", "prompt")

#: Our own schema's preset: (name, the columns that select it, the mapping).
MESSAGES_PRESET: tuple[str, tuple[str, ...], dict[str, str]] = (
    "messages",
    ("messages",),
    {"messages": "messages"},
)


def presets() -> tuple[tuple[str, tuple[str, ...], dict[str, str]], ...]:
    """The presets, tried in order: ours, verl's, TRL's (each trainer's is declared in its module)."""
    # trainers/ imports pydantic: only once a dataset is read, never when the plugin loads
    from ..trainers import trl, verl

    return (MESSAGES_PRESET, verl.PRESET, *trl.PRESETS)


def fields_key(fields: dict[str, str]) -> str:
    """A field mapping as a canonical string (equal for equal mappings, whatever their order)."""
    return " ".join(f"{t}={p}" for t, p in sorted(fields.items()))


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


def mapping_for(columns: list[str], fields: dict[str, str] | None) -> tuple[dict[str, str], str | None]:
    """The preset whose columns the file has, with the user's ``fields`` over it (mapping ``messages`` replaces
    the preset's ``prompt`` and the other way round); no preset and no fields: why not."""
    preset = next((dict(m) for _, needs, m in presets() if all(c in columns for c in needs)), None)
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


def forwarded_columns(columns: Sequence[str], mapping: dict[str, str]) -> list[str]:
    """The columns passed to the function as they are: those the mapping neither reads nor names as a target
    (``messages`` and ``prompt`` never)."""
    consumed = {p.split(".", 1)[0] for p in mapping.values()}
    return [c for c in columns if c not in consumed and c not in mapping and c not in TARGETS_NEVER_FORWARDED]


def map_row(row: dict[str, Any], fields: dict[str, str] | None) -> dict[str, Any]:
    """One row as a record, through the preset that fits its columns and ``fields`` over it (what a JSONL line of
    a trainer's schema goes through); ``SampleFormatError`` when nothing fits or the row lacks a mapped path."""
    mapping, problem = mapping_for(list(row), fields)
    if problem is not None:
        raise SampleFormatError(problem)
    return record(row, mapping, forwarded_columns(list(row), mapping))


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


def record(row: dict[str, Any], mapping: dict[str, str], forwarded: list[str]) -> dict[str, Any]:
    """One row (a dict of its columns) as a record: the mapped targets, and the ``forwarded`` columns as they are.
    A path the row lacks, or a prompt / response that is not text or messages, raises ``SampleFormatError``."""
    out: dict[str, Any] = {c: row[c] for c in forwarded}
    prompt = response = _ABSENT
    for target, path in mapping.items():
        value = _resolve(row, path)
        if target == "prompt":
            prompt = _turns(value, path)
        elif target == "response":
            response = None if value is None else _turns(value, path)
        elif target == "messages" and isinstance(value, list):
            out["messages"] = _turns(value, path)
        else:
            out[target] = value
    if prompt is not _ABSENT:
        if response is _ABSENT or response is None:
            out["prompt" if isinstance(prompt, str) else "messages"] = prompt
        else:
            out["messages"] = conversation(prompt, response)
    return out
