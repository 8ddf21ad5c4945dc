"""Preference pairs: a samples line (or a dataset row) with ``chosen`` and ``rejected`` is one test of a reward
function's ranking, "the better answer must score higher" (RewardBench's test).

Accepted shapes (TRL's preference format, standard and conversational, and RewardBench's rows):

* the context: ``prompt`` (a string, or a list of messages) or ``messages`` (a list of messages); neither, when
  ``chosen`` and ``rejected`` are whole conversations (TRL's implicit prompt): their common leading turns are the
  context;
* ``chosen``: one response, a string or a list of messages (the turns after the context);
* ``rejected``: one response (a string, or a list of messages: TRL's conversational form), or several, best-of-n
  (RewardBench 2): a list of strings, or a list of lists of messages. A list of dicts is one response, never n;
* ``id``, ``subset`` (a string: RewardBench's section), ``ground_truth`` as for any sample; every other field is a
  keyword argument of the reward function. ``expect`` is for samples, not pairs.

Each response is scored with the one calling convention, as the final assistant turn(s) of the same context
(:func:`response_samples`). A pair's key, what a comparison pairs it by across runs, is its ``id``, else a hash of
the whole pair: the context, the responses, the subset, the ground truth and the other fields (the responses are
the test's data; only the reward's scores may change between runs).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SampleFormatError

__all__ = ["PAIR_FIELDS", "PAIR_RESERVED", "Pair", "pair_key", "parse_pair"]

#: The fields a line is a preference pair by (either one makes it a pair; a pair needs both).
PAIR_FIELDS = ("chosen", "rejected")

#: The fields of a pair's line that are not keyword arguments of the reward function.
PAIR_RESERVED = frozenset(
    (
        "messages",
        "prompt",
        "id",
        "ground_truth",
        "ground_truth_for_eval",
        "expect",
        "chosen",
        "rejected",
        "subset",
    )
)


@dataclass(frozen=True, slots=True)
class Pair:
    """One preference test: a context, the chosen response and one or more rejected ones (each a list of turns)."""

    context: tuple[dict[str, Any], ...]
    """The messages before the responses (may be empty: a pair without a prompt)."""
    chosen: tuple[dict[str, Any], ...]
    rejected: tuple[tuple[dict[str, Any], ...], ...]
    subset: str | None = None
    best_of_n: bool = False
    """``rejected`` was given as a list of responses (even of one)."""

    @property
    def responses(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        """The chosen response first, then the rejected ones in file order."""
        return (self.chosen, *self.rejected)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number"}.get(
        type(value), "a number" if isinstance(value, float) else f"a {type(value).__name__}"
    )


def _message(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SampleFormatError(f"{where} must be a message object, got {_kind(value)}")
    role = value.get("role")
    if not isinstance(role, str) or not role.strip():
        raise SampleFormatError(f"{where}.role must be a non-empty string, got {_kind(role)}")
    content = value.get("content", "")
    if content is None and not value.get("tool_calls"):
        raise SampleFormatError(f"{where}.content is null but the message has no tool_calls")
    if content is not None and not isinstance(content, (str, list)):
        raise SampleFormatError(
            f"{where}.content must be a string, a list of parts or null, got {_kind(content)}"
        )
    return value


def _messages(value: list[Any], where: str) -> tuple[dict[str, Any], ...]:
    return tuple(_message(m, f"{where}[{i}]") for i, m in enumerate(value))


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def _response(value: Any, where: str) -> tuple[dict[str, Any], ...]:
    """One response: a string (the assistant's turn) or a non-empty list of messages."""
    if isinstance(value, str):
        return ({"role": "assistant", "content": value},)
    if _is_messages(value):
        turns = _messages(value, where)
        if turns[-1].get("role") != "assistant":
            raise SampleFormatError(
                f"{where!r} must end with an assistant turn (the response scored), got a {turns[-1]['role']!r} turn"
            )
        return turns
    if isinstance(value, list) and not value:
        raise SampleFormatError(f"{where!r} is an empty list: a response is a string or a list of messages")
    raise SampleFormatError(f"{where!r} must be a string or a list of messages, got {_kind(value)}")


def _rejected(value: Any) -> tuple[tuple[tuple[dict[str, Any], ...], ...], bool]:
    """The rejected responses, and whether they were given as a list of responses (best-of-n)."""
    if isinstance(value, str) or _is_messages(value):
        return (_response(value, "rejected"),), False
    if isinstance(value, list):
        if not value:
            raise SampleFormatError(
                "'rejected' is an empty list: give one rejected response (a string or a list of messages) or "
                "several (a list of them)"
            )
        if all(isinstance(v, str) for v in value) or all(_is_messages(v) for v in value):
            return tuple(_response(v, f"rejected[{i}]") for i, v in enumerate(value)), True
        kinds = sorted({_kind(v) for v in value})
        raise SampleFormatError(
            "'rejected' must be a string, a list of messages (one response), or a list of responses (strings, or "
            f"lists of messages, all of one kind); got a list of {', '.join(kinds)}"
        )
    raise SampleFormatError(f"'rejected' must be a string or a list of messages, got {_kind(value)}")


def _context(record: Mapping[str, Any]) -> tuple[dict[str, Any], ...] | None:
    """The context given as ``prompt`` or ``messages``; None when neither is (an implicit prompt)."""
    if "prompt" in record and "messages" in record:
        raise SampleFormatError("give either 'prompt' or 'messages' as the context of a pair, not both")
    if "messages" in record:
        value = record["messages"]
        if not isinstance(value, list):
            raise SampleFormatError(f"'messages' must be a list of messages, got {_kind(value)}")
        return _messages(value, "messages")
    if "prompt" in record:
        value = record["prompt"]
        if isinstance(value, str):
            return ({"role": "user", "content": value},) if value else ()
        if isinstance(value, list):
            return _messages(value, "prompt")
        raise SampleFormatError(f"'prompt' must be a string or a list of messages, got {_kind(value)}")
    return None


def _split_implicit(
    chosen: tuple[dict[str, Any], ...], rejected: tuple[tuple[dict[str, Any], ...], ...]
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...], tuple[tuple[dict[str, Any], ...], ...]]:
    """TRL's implicit prompt: the turns every response starts with are the context, the rest the responses (each
    keeps at least its last turn)."""
    shared = 0
    limit = min(len(r) for r in (chosen, *rejected)) - 1
    while shared < limit and all(r[shared] == chosen[shared] for r in rejected):
        shared += 1
    return chosen[:shared], chosen[shared:], tuple(r[shared:] for r in rejected)


def parse_pair(record: Mapping[str, Any]) -> Pair:
    """The pair a line holds (its other fields, ``id``, ``ground_truth`` and the keyword arguments, are the
    sample's: :data:`PAIR_RESERVED` are not keyword arguments). Raises ``SampleFormatError`` naming what is wrong."""
    prompt, chosen, rejected = record.get("prompt"), record.get("chosen"), record.get("rejected")
    if (  # the usual RewardBench row, without the general path's calls: three strings (and a subset)
        prompt.__class__ is str
        and prompt
        and chosen.__class__ is str
        and rejected.__class__ is str
        and chosen != rejected
        and "messages" not in record
        and "expect" not in record
    ):
        subset = record.get("subset")
        if subset is None or (subset.__class__ is str and subset.strip()):
            return Pair(
                ({"role": "user", "content": prompt},),
                ({"role": "assistant", "content": chosen},),
                (({"role": "assistant", "content": rejected},),),
                subset,
                False,
            )
    if "chosen" not in record:
        raise SampleFormatError(
            "preference pair without 'chosen': the line has 'rejected' but no 'chosen' (a pair needs both)"
        )
    if "rejected" not in record:
        raise SampleFormatError(
            "preference pair without 'rejected': the line has 'chosen' but no 'rejected' (a pair needs both; "
            "a list of rejected responses for best-of-n)"
        )
    if "expect" in record:
        raise SampleFormatError(
            "'expect' is for samples, not preference pairs (a pair's test is chosen > rejected)"
        )
    subset = record.get("subset")
    if subset is not None and (not isinstance(subset, str) or not subset.strip()):
        raise SampleFormatError(
            f"'subset' must be a non-empty string, got {_kind(subset)} {json.dumps(subset)}"
        )
    context = _context(record)
    chosen = _response(record["chosen"], "chosen")
    rejected, best_of_n = _rejected(record["rejected"])
    if context is None:
        context, chosen, rejected = _split_implicit(chosen, rejected)
    for i, response in enumerate(rejected):
        if response == chosen:
            which = f"rejected[{i}]" if best_of_n else "rejected"
            raise SampleFormatError(
                f"'chosen' is identical to {which!r}: the pair cannot tell a better answer from a worse one"
            )
    return Pair(context, chosen, rejected, subset, best_of_n)


_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def pair_key(pair: Pair, ground_truth: Any, kwargs: Mapping[str, Any], has_truth: bool) -> str:
    """``p:`` and 16 hex digits of the SHA-1 of the whole pair (what a comparison pairs pairs without ``id`` by)."""
    whole: dict[str, Any] = {
        "context": pair.context,
        "chosen": pair.chosen,
        "rejected": pair.rejected,
        "subset": pair.subset,
    }
    if has_truth:
        whole["ground_truth"] = ground_truth
    if kwargs:
        whole["kwargs"] = kwargs
    digest = hashlib.sha1(_canonical(whole).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"p:{digest}"
