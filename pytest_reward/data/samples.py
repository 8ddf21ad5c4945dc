"""Streaming JSONL reader: one ``Sample`` per line, or a ``SampleError`` that names ``file:line``.

A line is a JSON object with ``messages`` (a list of ``{"role", "content", ...}``; ``content`` may be null when
``tool_calls`` is given) or, for prompt-only samples, ``prompt``. Optional keys: ``id`` (string or integer),
``ground_truth`` or ``ground_truth_for_eval`` (forwarded as ``ground_truth``), ``expect`` (the golden expectation
for this sample). Every other key is forwarded to the reward function as a keyword argument.

A line in a trainer's schema is read as the same row of a dataset would be (:func:`.fields.map_row`): TRL's
``prompt`` with ``completion`` (strings or lists of messages), a ``prompt`` that is a list of messages. With a field
mapping (ini ``reward_sample_fields``, a marker's ``sample_fields=``) every line goes through it, except the rows of
a verl rollout dump, which have a shape of their own.

The reader never holds more than one line in memory: files are read in binary, line by line, with a size cap
(lines over it are reported, not loaded). UTF-8 with or without BOM; CRLF line ends; blank lines skipped.

Whatever a line holds, it costs at most that line: JSON nested deeper than ``MAX_DEPTH`` levels, an integer longer
than Python's digit limit (``sys.get_int_max_str_digits()``, 4300 by default) or a number too large for a float
is a ``SampleError`` for that line, like any other malformed line, never an exception that loses the file. Only
regular files are read: a FIFO, socket or device is reported without being opened for a blocking read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SampleFormatError
from .fields import map_row
from .preference import PAIR_RESERVED, Pair, pair_key, parse_pair

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "MAX_DEPTH",
    "NO_GROUND_TRUTH",
    "Expect",
    "RewardSampleWarning",
    "Sample",
    "SampleError",
    "count_lines",
    "iter_samples",
    "keyer",
    "not_a_regular_file",
    "parse_expect",
    "parse_record",
    "truth_lookalike",
]

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
#: Deepest accepted nesting of a line (the line's object is level 1), as serde_json's default limit. A fixed limit, so
#: that whether a line is accepted never depends on how deep in the call stack it happens to be decoded, and so that
#: whatever is done with a sample later (hashing, copying, reports) stays far from the recursion limit.
MAX_DEPTH = 128
_BOM = b"\xef\xbb\xbf"
_MISSING: Any = object()
#: ``Sample.ground_truth`` of a sample that has none (``Sample.has_ground_truth`` is False).
NO_GROUND_TRUTH: Any = _MISSING
_RESERVED = frozenset(("messages", "prompt", "id", "ground_truth", "ground_truth_for_eval", "expect"))


class RewardSampleWarning(UserWarning):
    """A samples file that is readable but probably not what its author meant (a misspelt field)."""


_TRUTH_LOOKALIKES = frozenset(("groundtruth", "gt"))


def truth_lookalike(sample: Sample, function: str, parameters: Sequence[str]) -> str | None:
    """The warning for a sample without a ground truth that carries a field looking like a misspelt
    ``ground_truth`` (``groundtruth``, ``ground-truth``, ``GroundTruth``, ``gt``), when ``function`` takes
    ``ground_truth`` (and so receives None); None otherwise."""
    if sample.has_ground_truth or "ground_truth" not in parameters:
        return None
    for key in sample.kwargs:
        if key.lower().replace("-", "").replace("_", "") in _TRUTH_LOOKALIKES:
            return (
                f"{sample.path.name}: its samples carry {key!r} but no 'ground_truth', so {function} receives "
                f"ground_truth=None; rename the field to 'ground_truth', or map it: "
                f"@pytest.mark.reward(sample_fields={{'ground_truth': {key!r}}})"
            )
    return None


@dataclass(frozen=True, slots=True)
class Bound:
    """An expectation on one number: ``score ± tol``, and/or ``min`` / ``max``."""

    equals: float | None = None
    tol: float = 1e-6
    min: float | None = None
    max: float | None = None
    replay: bool = False
    """A trainer's recorded score (``--reward-replay-tolerance``), not an expectation someone wrote."""

    @property
    def label(self) -> str:
        """How a miss of this bound is reported: ``replay: ...`` or ``expect score: ...``."""
        return "replay" if self.replay else "expect score"

    def check(self, value: float) -> str | None:
        """None when ``value`` meets the bound, else what went wrong."""
        if self.replay and self.equals is not None and not abs(value - self.equals) <= self.tol:
            return f"the trainer recorded {self.equals:g}, the reward gives {value:.6g} now (tolerance {self.tol:g})"
        if self.equals is not None and not abs(value - self.equals) <= self.tol:
            return f"expected {self.equals:g} ± {self.tol:g}, got {value:.6g}"
        if self.min is not None and not value >= self.min:
            return f"expected ≥ {self.min:g}, got {value:.6g}"
        if self.max is not None and not value <= self.max:
            return f"expected ≤ {self.max:g}, got {value:.6g}"
        return None

    def describe(self) -> str:
        parts = []
        if self.equals is not None:
            parts.append(f"{self.equals:g} ± {self.tol:g}")
        if self.min is not None:
            parts.append(f"≥ {self.min:g}")
        if self.max is not None:
            parts.append(f"≤ {self.max:g}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Expect:
    """Golden expectation of one sample: a bound on the score and bounds on named metrics, for every reward
    function that scores the sample, plus expectations for named functions only (``functions``)."""

    score: Bound | None = None
    metrics: tuple[tuple[str, Bound], ...] = ()
    functions: tuple[tuple[str, Expect], ...] = ()

    def for_function(self, *names: str) -> Expect | None:
        """The expectation that applies to a function known by any of ``names`` (shared bounds and its own)."""
        own = [e for name, e in self.functions if name in names]
        if not own:
            return self if (self.score is not None or self.metrics) else None
        merged_metrics = dict(self.metrics)
        score = self.score
        for e in own:
            merged_metrics.update(dict(e.metrics))
            score = e.score if e.score is not None else score
        return Expect(score=score, metrics=tuple(sorted(merged_metrics.items())))


@dataclass(slots=True)
class Sample:
    """One parsed line of a samples file."""

    path: Path
    line: int
    id: str | None
    messages: list[dict[str, Any]] | None
    prompt: str | None = None
    ground_truth: Any = _MISSING
    expect: Expect | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None
    _key: str | None = field(default=None, repr=False, compare=False)
    _response: Any = field(default=_MISSING, repr=False, compare=False)
    recorded: float | None = None
    """The score a trainer recorded for this sample (a rollout dump's ``score``): ``--reward-replay-tolerance``."""
    unit: str = "line"
    """What ``line`` counts: ``"line"`` (JSONL) or ``"row"`` (a dataset: ``sources.read_samples``)."""
    pair: Pair | None = None
    """A preference pair (:mod:`.preference`): the line's ``chosen`` and ``rejected``; ``messages`` is then the
    context with the chosen response, for the reports."""

    @property
    def has_ground_truth(self) -> bool:
        return self.ground_truth is not _MISSING

    @property
    def label(self) -> str:
        """The item-name part: the sample's ``id``, else ``line-N``."""
        return _safe_label(self.id) if self.id is not None else f"{self.unit}-{self.line}"

    @property
    def location(self) -> str:
        return f"{self.path.name}:{self.line}" if self.unit == "line" else f"{self.path.name}:row {self.line}"

    @property
    def prompt_only(self) -> bool:
        """True when the sample has no response yet: ``prompt`` given, or ``messages`` ending with a user turn."""
        if self.messages is None:
            return True
        return bool(self.messages) and self.messages[-1].get("role") == "user"

    @property
    def key(self) -> str:
        """Stable identity across runs, what a comparison pairs samples by: ``id:<id>`` when the sample has an
        ``id``; else ``q:`` and a hash of what was asked (:func:`question_hash`), not of the answer, so that a
        changed response is the same sample with a new score. The second, third … sample of one file asking
        exactly the same get ``#2``, ``#3`` … (numbered in file order by :func:`iter_samples`, so that every
        granularity and every xdist worker sees the same keys). A sample read with ``keys=False`` has the empty
        key; one built outside a file is its own first occurrence."""
        if self._key is None:
            if self.id is not None:
                self._key = f"id:{self.id}"
            elif self.pair is not None:
                self._key = pair_key(self.pair, self.ground_truth, self.kwargs, self.has_ground_truth)
            else:
                self._key = "q:" + question_hash(self)
        return self._key

    @property
    def response_hash(self) -> str | None:
        """Short hash of the final assistant turn, the answer being scored (:func:`response_hash`); None when
        there is none (a prompt-only sample) or the sample was read with ``keys=False``."""
        if self._response is _MISSING:
            self._response = None if self.pair is not None else response_hash(self.messages)
        return self._response  # type: ignore[no-any-return]


_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_json_str = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _sha1(text: str, size: int) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def _answered(messages: list[dict[str, Any]] | None) -> bool:
    return bool(messages) and type(messages[-1]) is dict and messages[-1].get("role") == "assistant"  # type: ignore[index]


def asked(sample: Sample) -> dict[str, Any]:
    """What the sample asks: ``messages`` without the final assistant turn (a prompt-only sample's conversation or
    ``prompt`` as given), ``ground_truth`` when given, and ``kwargs``, the other input fields, when there are any.
    Left out: the final assistant turn, ``id``, ``expect`` (a golden expectation is about the test, not the
    question), and whether the ground truth was spelled ``ground_truth_for_eval``."""
    messages = sample.messages
    out: dict[str, Any] = (
        {"prompt": sample.prompt}
        if messages is None
        else {"messages": messages[:-1] if _answered(messages) else messages}
    )
    if sample.ground_truth is not _MISSING:
        out["ground_truth"] = sample.ground_truth
    if sample.kwargs:
        out["kwargs"] = sample.kwargs
    return out


def _message_json(message: Any) -> str | None:
    """The canonical JSON of the usual message (``role`` and ``content``, both strings); None for any other."""
    if type(message) is dict and len(message) == 2:
        role, content = message.get("role"), message.get("content")
        if type(role) is str and type(content) is str:
            return f'{{"content":{_json_str(content)},"role":{_json_str(role)}}}'
    return None


def asked_json(sample: Sample) -> str:
    """``asked(sample)`` as canonical JSON (sorted keys, no whitespace); the usual sample (plain messages, a string
    or no ground truth, no other fields) without the generic encoder's cost. Property-tested equal."""
    messages, truth = sample.messages, sample.ground_truth
    if (
        messages is not None
        and not sample.kwargs
        and (truth is _MISSING or truth is None or type(truth) is str)
    ):
        parts = [_message_json(m) for m in (messages[:-1] if _answered(messages) else messages)]
        if None not in parts:
            if truth is _MISSING:
                head = "{"
            else:
                head = '{"ground_truth":' + ("null" if truth is None else _json_str(truth)) + ","
            return head + '"messages":[' + ",".join(parts) + "]}"  # type: ignore[arg-type]
    return _canonical(asked(sample))


def question_hash(sample: Sample) -> str:
    """16 hex digits of the SHA-1 of :func:`asked_json`: the same for the same question, whatever the answer."""
    return _sha1(asked_json(sample), 16)


def response_hash(messages: list[dict[str, Any]] | None) -> str | None:
    """12 hex digits of the SHA-1 of the final assistant turn's canonical JSON (the whole message: content, tool
    calls, …); None when the conversation does not end with one."""
    if not _answered(messages):
        return None
    last = messages[-1]  # type: ignore[index]
    return _sha1(_message_json(last) or _canonical(last), 12)


class _Keys:
    """Keys of one file's samples, assigned as the file is read: exact duplicates of a question numbered in file
    order, and the response hash taken before any reward function sees the sample."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def __call__(self, item: Sample | SampleError) -> Sample | SampleError:
        # What Sample.key and Sample.response_hash compute, inline: this runs once per line of a stored run.
        if type(item) is Sample and item.pair is not None:
            item._response = None  # a pair's responses are part of its key: the key changes when they do
            if item.id is None:
                key = pair_key(item.pair, item.ground_truth, item.kwargs, item.has_ground_truth)
                n = self.seen[key] = self.seen.get(key, 0) + 1
                item._key = key if n == 1 else f"{key}#{n}"
            else:
                item._key = f"id:{item.id}"
        elif type(item) is Sample:
            messages = item.messages
            last = messages[-1] if messages else None
            if type(last) is dict and last.get("role") == "assistant":
                text = _message_json(last) or _canonical(last)
                item._response = _sha1(text, 12)
            else:
                item._response = None
            if item.id is None:
                key = "q:" + _sha1(asked_json(item), 16)
                n = self.seen[key] = self.seen.get(key, 0) + 1
                item._key = key if n == 1 else f"{key}#{n}"
            else:
                item._key = f"id:{item.id}"
        return item


def _no_keys(item: Sample | SampleError) -> Sample | SampleError:
    if type(item) is Sample:
        item._key, item._response = "", None
    return item


def keyer(keys: bool = True) -> Any:
    """What :func:`iter_samples` applies to each record of one file (keys and response hashes, or none): for the
    other readers of samples (``sources.read_samples``)."""
    return _Keys() if keys else _no_keys


@dataclass(frozen=True, slots=True)
class SampleError:
    """A line that is not a valid sample."""

    path: Path
    line: int
    message: str
    unit: str = "line"
    """What ``line`` counts: ``"line"`` (JSONL) or ``"row"`` (a dataset)."""

    @property
    def location(self) -> str:
        return f"{self.path.name}:{self.line}" if self.unit == "line" else f"{self.path.name}:row {self.line}"

    @property
    def label(self) -> str:
        return f"{self.unit}-{self.line}"


def _safe_label(value: str) -> str:
    # Keep node ids parseable: no "::" and no control characters.
    out = value.replace("::", ":_:")
    if not out.isprintable():
        out = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in out)
    return out


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_message(i: int, msg: Any) -> None:
    """Raise ``SampleFormatError`` naming what is wrong with ``messages[i]`` (``parse_record`` inlines the check
    of the usual message and calls this for the rest)."""
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise SampleFormatError(f"{where} must be an object, got {_describe(msg)}")
    if "role" not in msg:
        raise SampleFormatError(f"{where} has no 'role'")
    role = msg["role"]
    if not isinstance(role, str) or not role.strip():
        raise SampleFormatError(f"{where}.role must be a non-empty string, got {_describe(role)}")
    content = msg.get("content", "")
    if content is None:
        if not msg.get("tool_calls") and not msg.get("function_call"):
            raise SampleFormatError(f"{where}.content is null but the message has no tool_calls")
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise SampleFormatError(f"{where}.content[{j}] must be an object, got {_describe(part)}")
    elif not isinstance(content, str):
        raise SampleFormatError(
            f"{where}.content must be a string, a list of parts or null, got {_describe(content)}"
        )
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None and (
        not isinstance(tool_calls, list) or not all(isinstance(t, dict) for t in tool_calls)
    ):
        raise SampleFormatError(f"{where}.tool_calls must be a list of objects")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SampleFormatError(f"{where} must be a finite number, got {_describe(value)}")
    try:
        out = float(value)  # an integer too large for a float raises OverflowError
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise SampleFormatError(f"{where} must be a finite number, got {_describe(value)}")
    return out


def _parse_bound(spec: Any, where: str) -> Bound:
    if not isinstance(spec, dict):
        raise SampleFormatError(f'{where} must be an object like {{"score": 0.5, "tol": 0.01}}')
    unknown = set(spec) - {"score", "tol", "min", "max"}
    if unknown:
        raise SampleFormatError(
            f"{where} has unknown key(s) {sorted(unknown)}; allowed: score, tol, min, max"
        )
    if "tol" in spec and "score" not in spec:
        raise SampleFormatError(f"{where}.tol needs {where}.score")
    bound = Bound(
        equals=_number(spec["score"], f"{where}.score") if "score" in spec else None,
        tol=_number(spec["tol"], f"{where}.tol") if "tol" in spec else 1e-6,
        min=_number(spec["min"], f"{where}.min") if "min" in spec else None,
        max=_number(spec["max"], f"{where}.max") if "max" in spec else None,
    )
    if bound.tol < 0:
        raise SampleFormatError(f"{where}.tol must be ≥ 0")
    if bound.min is not None and bound.max is not None and bound.min > bound.max:
        raise SampleFormatError(f"{where}: min {bound.min:g} > max {bound.max:g}")
    return bound


def parse_expect(spec: Any, where: str = "expect", *, nested: bool = False) -> Expect:
    """Parse an ``expect`` object: ``{"score": .67, "tol": .01}``, ``{"min": .5}``, ``{"metrics": {...}}``, and
    ``{"functions": {"relevance": {...}}}`` for bounds that apply to one reward function only."""
    if not isinstance(spec, dict):
        raise SampleFormatError(f"'{where}' must be an object, got {_describe(spec)}")
    metrics_spec = spec.get("metrics", {})
    functions_spec = spec.get("functions", {})
    score_spec = {k: v for k, v in spec.items() if k not in ("metrics", "functions")}
    if not isinstance(metrics_spec, dict):
        raise SampleFormatError(f"'{where}.metrics' must be an object mapping metric names to bounds")
    if not isinstance(functions_spec, dict) or (nested and functions_spec):
        raise SampleFormatError(
            f"'{where}.functions' must be an object mapping reward function names to expectations"
        )
    if not score_spec and not metrics_spec and not functions_spec:
        raise SampleFormatError(f"'{where}' is empty; give score/tol, min, max, metrics or functions")
    return Expect(
        score=_parse_bound(score_spec, where) if score_spec else None,
        metrics=tuple(
            (str(name), _parse_bound(b, f"{where}.metrics.{name}"))
            for name, b in sorted(metrics_spec.items())
        ),
        functions=tuple(
            (str(name), parse_expect(e, f"{where}.functions.{name}", nested=True))
            for name, e in sorted(functions_spec.items())
        ),
    )


def parse_record(record: Any, path: Path, line: int) -> Sample:
    """Validate one decoded JSON value. Raises ``SampleFormatError`` naming the offending field."""
    if not isinstance(record, dict):
        raise SampleFormatError(f"each line must be a JSON object, got {type(record).__name__}")
    if "chosen" in record or "rejected" in record:
        return _pair_sample(record, path, line)
    if "messages" not in record and "prompt" not in record and ("input" in record or "output" in record):
        if "input" in record and "output" in record:
            return _verl_dump_row(record, path, line)  # a verl dump row: input and output, no messages, no prompt
        missing, has = ("output", "input") if "input" in record else ("input", "output")
        raise SampleFormatError(
            f"verl dump row: missing {missing!r} (the row has {has!r}; a dump row holds 'input', the prompt, and "
            "'output', the response), or give 'messages' for a conversation"
        )
    messages = record.get("messages", _MISSING)
    prompt = record.get("prompt")
    if messages is _MISSING:
        if prompt is None:
            raise SampleFormatError("missing 'messages' (or 'prompt' for a prompt-only sample)")
        messages = None
    elif not isinstance(messages, list):
        raise SampleFormatError(f"'messages' must be a list, got {type(messages).__name__}")
    elif not messages:
        raise SampleFormatError("'messages' is empty")
    else:
        for i, msg in enumerate(messages):
            if type(msg) is dict:  # the usual message, inline (as in _check_message)
                role, content = msg.get("role"), msg.get("content", "")
                if (
                    type(role) is str
                    and role
                    and not role.isspace()
                    and type(content) is str
                    and "tool_calls" not in msg
                ):
                    continue
            _check_message(i, msg)
    if prompt is not None and not isinstance(prompt, str):
        raise SampleFormatError(f"'prompt' must be a string, got {type(prompt).__name__}")
    if prompt is not None and messages is not None:
        raise SampleFormatError("give either 'messages' or 'prompt', not both")

    sample_id = _sample_id(record)
    ground_truth = _ground_truth(record)
    expect = parse_expect(record["expect"]) if "expect" in record else None
    kwargs = {k: v for k, v in record.items() if k not in _RESERVED}
    # Positional (cheaper than keywords, once per sample): path, line, id, messages, prompt, ground_truth,
    # expect, kwargs, record.
    return Sample(path, line, sample_id, messages, prompt, ground_truth, expect, kwargs, record)


def _sample_id(record: dict[str, Any]) -> str | None:
    sample_id = record.get("id")
    if sample_id is not None:
        if isinstance(sample_id, bool) or not isinstance(sample_id, (str, int)):
            raise SampleFormatError(f"'id' must be a string or an integer, got {_describe(sample_id)}")
        sample_id = str(sample_id)
        if not sample_id.strip():
            raise SampleFormatError("'id' is empty")
    return sample_id


def _ground_truth(record: dict[str, Any]) -> Any:
    ground_truth = record.get("ground_truth", _MISSING)
    if "ground_truth_for_eval" in record:
        if ground_truth is not _MISSING:
            raise SampleFormatError("give either 'ground_truth' or 'ground_truth_for_eval', not both")
        ground_truth = record["ground_truth_for_eval"]
    return ground_truth


def _pair_sample(record: dict[str, Any], path: Path, line: int) -> Sample:
    """A preference pair (:func:`.preference.parse_pair`) as the sample that carries it: ``messages`` the context
    and the chosen response (what reports show), the pair itself in ``Sample.pair``."""
    pair = parse_pair(record)
    sample_id = _sample_id(record) if "id" in record else None
    ground_truth = _ground_truth(record)
    # the usual row has no other field (a set comparison instead of a loop over the row)
    kwargs = {} if record.keys() <= PAIR_RESERVED else {k: v for k, v in record.items() if k not in PAIR_RESERVED}
    messages = [*pair.context, *pair.chosen]
    # positional: path, line, id, messages, prompt, ground_truth, expect, kwargs, record, _key, _response, recorded,
    # unit, pair
    return Sample(
        path, line, sample_id, messages, None, ground_truth, None, kwargs, record, None, _MISSING, None, "line", pair
    )


def _verl_dump_row(record: dict[str, Any], path: Path, line: int) -> Sample:
    """A row of verl's rollout / validation dump (:func:`pytest_reward.trainers.verl.dump_record`): the record
    whole, the score verl recorded as :attr:`Sample.recorded`."""
    # trainers/ imports pydantic: only once a dump row is met, never when the plugin loads
    from ..trainers import verl

    mapped, score = verl.dump_record(record)
    recorded = None if score is None else _number(score, "verl dump row 'score'")
    messages = mapped.pop("messages")
    ground_truth = mapped.pop("ground_truth", _MISSING)
    # the conversation is built from text by conversation(): taken as it is, without parse_record's checks
    sample = Sample(path, line, None, messages, None, ground_truth, None, mapped, record)
    sample.recorded = recorded
    return sample


_scan = json.JSONDecoder().scan_once


def _decode(text: str) -> Any:
    """``json.loads(text)`` for one line: the C scanner directly on the usual line (a value, then the newline or
    nothing); anything else, errors included, through ``json.loads`` (same values, same error messages)."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)  # raises the JSONDecodeError (or decodes after leading whitespace)
    if end == len(text) or (end == len(text) - 1 and text[end] == "\n"):
        return value
    return json.loads(text)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` levels deep (``value`` itself is level 1).
    Iterative: it must not recurse on exactly the values it is there to catch."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep (arrays and objects inside each other)"


def _foreign(record: dict[str, Any], fields: dict[str, str] | None) -> bool:
    """Whether a line is read through a field mapping (:func:`.fields.map_row`): with ``fields``, every line but a
    verl dump row; without, a line of TRL's schema (``prompt`` and ``completion``, or ``prompt`` as messages)."""
    if "messages" in record:
        return bool(fields)
    if "prompt" not in record:
        return bool(fields) and not ("input" in record and "output" in record)
    return bool(fields) or "completion" in record or type(record["prompt"]) is list


def _read_line(
    text: str, path: Path, lineno: int, fields: dict[str, str] | None = None
) -> Sample | SampleError:
    """One decoded, validated line, or the ``SampleError`` that says what is wrong with it."""
    try:
        record = _decode(text)
    except json.JSONDecodeError as exc:
        return SampleError(path, lineno, f"invalid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:  # nested deeper than the decoder can follow from here
        return SampleError(path, lineno, _TOO_DEEP)
    except ValueError as exc:  # an integer over Python's digit limit (sys.set_int_max_str_digits)
        return SampleError(path, lineno, f"invalid JSON: {exc}")
    # Depth is at most the number of opening brackets: only lines with many of them are walked.
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(record, MAX_DEPTH):
        return SampleError(path, lineno, _TOO_DEEP)
    try:
        if (
            type(record) is dict
            and (fields or "messages" not in record)
            and "chosen" not in record
            and "rejected" not in record
            and _foreign(record, fields)
        ):
            record = map_row(record, fields)
        return parse_record(record, path, lineno)
    except SampleFormatError as exc:
        return SampleError(path, lineno, str(exc))


def not_a_regular_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists but is not a regular file or a directory ("a FIFO (named pipe)", "a
    socket", "a character device", "a block device"); None otherwise. A ``stat``: it never opens ``path``."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return _special_kind(mode)


def _special_kind(mode: int) -> str | None:
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def _open_regular(path: Path) -> tuple[Any, str | None]:
    """``(binary file, None)`` for a regular file; ``(None, what it is)`` for anything else. Opened non-blocking and
    checked on the open descriptor: opening a FIFO never waits for a writer, and nothing can be swapped in between
    the check and the read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        kind = not_a_regular_file(path)  # a socket cannot be opened at all (ENXIO)
        if kind is None:
            raise
        return None, kind
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _special_kind(mode) or "a directory"
            os.close(fd)
            return None, kind
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), None
    except BaseException:
        os.close(fd)
        raise


def _skip_rest_of_line(fh: Any, chunk: int = 1 << 20) -> int:
    """Consume the remainder of an over-long line; return how many bytes were skipped."""
    skipped = 0
    while True:
        part = fh.readline(chunk)
        skipped += len(part)
        if not part or part.endswith(b"\n"):
            return skipped


def iter_samples(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    keys: bool = True,
    fields: dict[str, str] | None = None,
) -> Iterator[Sample | SampleError]:
    """Yield a ``Sample`` or a ``SampleError`` for every non-blank line of ``path``, streaming. A path that is not
    a regular file (a FIFO, a socket, a device) is one ``SampleError`` at line 1, and is not read.

    Each sample's key and response hash are taken as it is read (``Sample.key``: duplicates numbered in file
    order); ``keys=False`` skips them, for a run that stores no per-sample data (the key is then empty).
    ``fields``: the field mapping the lines are read with (see the module's docstring)."""
    path = Path(path)
    keyed = _Keys() if keys else _no_keys
    fh, kind = _open_regular(path)
    if fh is None:
        yield SampleError(
            path, 1, f"{path} is {kind}, not a regular file: samples files must be files on disk"
        )
        return
    with fh:
        lineno = 0
        while True:
            raw = fh.readline(max_line_bytes + 1)
            if not raw:
                return
            lineno += 1
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                size = len(raw) + _skip_rest_of_line(fh)
                yield SampleError(
                    path,
                    lineno,
                    f"line is {size / 2**20:.1f} MiB, over the {max_line_bytes / 2**20:g} MiB limit "
                    "(raise it with the ini option reward_max_line_bytes)",
                )
                continue
            if raw.isspace():  # a blank line (raw is never empty here)
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield SampleError(
                    path, lineno, f"not valid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})"
                )
                continue
            yield keyed(_read_line(text, path, lineno, fields))


def count_lines(path: str | os.PathLike[str], *, limit: int | None = None) -> int:
    """Number of lines (a fast byte scan; stops early once ``limit`` is exceeded). 0 for a path that is not a
    regular file (it is not read: :func:`iter_samples` reports it)."""
    count = 0
    fh, _ = _open_regular(Path(path))
    if fh is None:
        return 0
    with fh:
        tail = b"\n"
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            count += chunk.count(b"\n")
            tail = chunk[-1:]
            if limit is not None and count > limit:
                return count
        if tail != b"\n":
            count += 1
    return count
