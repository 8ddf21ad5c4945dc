"""Reward-hacking probes: mutations of a sample's response, the rules their scores must keep, and the registry.

A reward function that scores the samples well can still be gamed: a policy under RL finds the empty answer that
scores like a wrong one, the answer that lists every candidate, the well-formed tags around nothing. A probe
builds a mutated response from each sample's response (deterministically: the randomness a mutation uses is
seeded by ``--reward-seed``, the probe and the sample), the reward function scores it exactly as it scores the
samples (:mod:`pytest_reward.probe_items`), and the probe's **rule** says what that score may be:

=================  ==========================================================================================
rule               holds when the mutated response's score ...
=================  ==========================================================================================
``<= floor``       is at most the function's *floor*: the lowest score of the samples' own responses (0 when
                   none has one): a response that earns nothing must not beat the worst real answer
``<= original``    is at most the score of the sample's own response (the mutation must not help)
``== original``    equals the score of the sample's own response (the reward is invariant to the mutation)
``not pass``       does not pass: below the marker's ``threshold`` when one is declared; without one, a pass
                   is a score above the floor that is as high as the best sample's (full credit)
``info``           anything: the scores are reported, the probe never fails
=================  ==========================================================================================

The floor is only as low as the samples make it: when every sample passes, ``<= floor`` rules compare with a
passing score, and the probe's result says so (add wrong answers to the samples to give them teeth).
``<=`` and ``==`` rules take a tolerance for noisy rewards: ``"<= original + 0.05"``, ``"== original ± 0.02"``
(``+-`` and ``+/-`` work too). A response with no valid score (``is_score_valid=False``, a non-finite score)
earns nothing: it keeps every ``<=`` and ``not pass`` rule, and breaks ``== original`` unless the original had no
valid score either. A reward that *raises* on a mutated response breaks every rule but ``info``: a policy can
produce that response, and the trainer would get no score for it.

The built-in probes (``probes="default"`` runs the first six):

=====================  ===============  ====================================================================
probe                  default rule     the mutated response, and why
=====================  ===============  ====================================================================
``empty``              ``<= floor``     empty or whitespace: a policy that says nothing must not be paid
``echo``               ``<= floor``     the user's last message, verbatim: repeating the question is no
                                        answer
``stuffing``           ``not pass``     many candidate answers (numbers around the truth, every option
                                        letter, the ground truth among decoys), the truth never first nor
                                        last: a reward that finds the truth *anywhere* pays for guessing
                                        everything
``repeat``             ``<= original``  the response three times: length or keyword counts must not pay
``format_only``        ``<= floor``     the response's structure (``<think>``/``<answer>`` tags,
                                        ``\\boxed{}``, JSON, code fences) with junk inside: form without
                                        content earns nothing
``truncate``           ``not pass``     the response cut where its answer begins (the first mention of the
                                        ground truth, else the last answer marker): no answer, no pass
``case``               ``== original``  letters' case changed (not LaTeX commands, tags or code): only when
                                        the reward is declared case-invariant by listing this probe
``whitespace``         ``== original``  spaces doubled and the response padded (code blocks untouched): only
                                        when declared whitespace-invariant by listing this probe
``ground_truth_leak``  ``info``         a failing response with its final answer replaced by the ground
                                        truth: how often a reward meant to grade reasoning passes a pasted
                                        answer
=====================  ===============  ====================================================================

A probe applies to a sample when its mutation returns a string (``None``: nothing to mutate, e.g. ``stuffing``
without a ground truth, ``format_only`` on a response without structure); only samples whose conversation ends
with an assistant turn of text are probed.

Custom probes: ``@pytest_reward.probe("name", rule="<= original")`` on a function ``(response, sample) -> str |
None`` (``sample`` is a :class:`ProbeSample`), or ``probes.register(...)`` in the ``pytest_reward_probes`` hook.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import GateError

__all__ = [
    "BUILTIN_PROBES",
    "DEFAULT_PROBES",
    "Probe",
    "ProbeRegistry",
    "ProbeSample",
    "Rule",
    "SeededRandom",
    "answer_start",
    "decorated_probes",
    "floor_of",
    "parse_rule",
    "passes",
    "probe",
    "response_text",
    "truth_texts",
    "with_response_text",
]

# --- rules ---------------------------------------------------------------------------------------------------

#: Scores within this (relative to the larger magnitude, at least absolute) count as equal: float rounding only.
EPS = 1e-9

_RULE = re.compile(
    r"^\s*(?:(?P<op><=|==)\s*(?P<ref>floor|original)(?:\s*(?P<sign>\+/-|\+-|±|\+)\s*(?P<tol>\d+(?:\.\d*)?|\.\d+))?"
    r"|(?P<word>not\s+pass|info))\s*$"
)
RULE_FORMS = ('"<= floor"', '"<= original"', '"== original"', '"not pass"', '"info"')


@dataclass(frozen=True, slots=True)
class Rule:
    """A probe's rule (see the module docstring), parsed from its text by :func:`parse_rule`."""

    kind: str
    """``<=``, ``==``, ``not pass`` or ``info``."""
    ref: str | None = None
    """``floor`` or ``original`` (``<=`` and ``==`` rules)."""
    tol: float = 0.0

    @property
    def text(self) -> str:
        if self.ref is None:
            return self.kind
        if not self.tol:
            return f"{self.kind} {self.ref}"
        return f"{self.kind} {self.ref} {'±' if self.kind == '==' else '+'} {self.tol:g}"

    def __str__(self) -> str:
        return self.text

    def holds(self, score: float | None, original: float | None, floor: float, passed: bool) -> bool:
        """Whether the mutated response's ``score`` (None: no valid score) keeps the rule (:meth:`check` without
        the words: what a run counts once it keeps no more counter-examples). ``original``: the sample's own score
        (None: it had none, the floor stands in); ``passed``: whether the mutated response passes (see
        :func:`passes`)."""
        kind = self.kind
        if kind == "info":
            return True
        if kind == "not pass":
            return not passed
        ref = floor if self.ref == "floor" or original is None else original
        if kind == "<=":
            return score is None or score <= ref + self.tol + _eps(score, ref)
        # "=="
        if self.ref == "original" and original is None:
            return score is None
        return score is not None and abs(score - ref) <= self.tol + _eps(score, ref)

    def check(self, score: float | None, original: float | None, floor: float, passed: bool) -> str | None:
        """None when the mutated response's ``score`` keeps the rule (:meth:`holds`), else why not."""
        if self.holds(score, original, floor, passed):
            return None
        if self.kind == "not pass":
            return f"it passes ({_g(score)})"
        if self.ref == "floor":
            ref, name = floor, "floor"
        else:
            ref, name = (original if original is not None else floor), "original"
        if self.kind == "<=":
            return f"score {_g(score)} > {name} {_g(ref)}" + (f" + {self.tol:g}" if self.tol else "")
        # "=="
        if self.ref == "original" and original is None:
            return f"score {_g(score)} where the original had no valid score"
        if score is None:
            return f"no valid score where the {name} scored {_g(ref)}"
        return f"score {_g(score)} ≠ {name} {_g(ref)}" + (f" ± {self.tol:g}" if self.tol else "")


def _eps(a: float, b: float) -> float:
    return EPS * max(1.0, abs(a), abs(b))


def _g(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def parse_rule(text: Any) -> Rule:
    """A rule from its text; ``GateError`` (a ``ValueError``) naming the allowed forms otherwise."""
    if not isinstance(text, str):
        raise GateError(f"a probe rule must be a string like {RULE_FORMS[0]}, got {text!r}")
    m = _RULE.match(text)
    if m is None:
        raise GateError(
            f"unknown probe rule {text!r}; rules: {', '.join(RULE_FORMS)}, the first three with an optional "
            'tolerance ("<= original + 0.05", "== original ± 0.02")'
        )
    if m.group("word"):
        return Rule(" ".join(m.group("word").split()))
    tol = float(m.group("tol")) if m.group("tol") else 0.0
    return Rule(m.group("op"), m.group("ref"), tol)


def floor_of(scores: Iterable[float | None]) -> float:
    """The function's floor: the lowest valid score of the samples' own responses (0 when none has one)."""
    return min((s for s in scores if s is not None), default=0.0)


def passes(
    score: float | None, *, verdict_pass: bool, threshold: float | None, floor: float, ceiling: float | None
) -> bool:
    """Whether a mutated response passes: with a ``threshold``, its verdict is a pass (``verdict_pass``: the
    threshold and the metric thresholds are met); without one, it scores above the ``floor`` and at least the
    ``ceiling`` (the best valid score of the samples' own responses; None: there was none)."""
    if score is None:
        return False
    if threshold is not None:
        return verdict_pass
    if score <= floor + _eps(score, floor):
        return False
    return ceiling is None or score >= ceiling - _eps(score, ceiling)


# --- what a mutation sees --------------------------------------------------------------------------------------


class SeededRandom(random.Random):
    """``random.Random`` on SplitMix64, seeded by a hash of any string: the same methods (``choice``,
    ``shuffle``, ``randrange``, ``random``...) and the same sequence on every platform and process, for a
    microsecond of seeding instead of the Mersenne Twister's ten (a probe seeds one per sample)."""

    _MASK = (1 << 64) - 1

    def seed(self, a: Any = None, version: int = 2) -> None:
        digest = hashlib.blake2b(str(a).encode("utf-8", "surrogatepass"), digest_size=8).digest()
        self._state = int.from_bytes(digest, "little")

    def _next(self) -> int:
        self._state = z = (self._state + 0x9E3779B97F4A7C15) & self._MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self._MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self._MASK
        return z ^ (z >> 31)

    def getrandbits(self, k: int) -> int:
        if k <= 64:
            return self._next() >> (64 - k) if k else 0
        out, bits = 0, 0
        while bits < k:
            out, bits = (out << 64) | self._next(), bits + 64
        return out >> (bits - k)

    def random(self) -> float:
        return (self._next() >> 11) * (1.0 / (1 << 53))

    def _randbelow(self, n: int) -> int:  # type: ignore[override]
        # what choice(), shuffle(), randrange() and sample() draw from: one step for any n < 2**32 (a modulo bias
        # below 2**-32, nothing a probe can notice), instead of the base class's rejection loop in Python
        if n <= 1 << 32:
            return self._next() % n
        return super()._randbelow(n)  # type: ignore[misc]

    def getstate(self) -> Any:
        return self._state

    def setstate(self, state: Any) -> None:
        self._state = state


class ProbeSample:
    """One sample as a probe's mutation sees it. Everything is read-only: ``messages``, ``ground_truth`` and
    ``fields`` hand out private copies (a mutation cannot change the sample the real items score).

    * ``response``: the text of the final assistant turn (also the mutation's first argument);
    * ``messages``: the whole conversation, ending with that turn; ``user``: the text of the last user turn (or
      None);
    * ``ground_truth`` (None when the sample has none) and ``has_ground_truth``; ``fields``: the sample's other
      input fields; ``id``, ``line``;
    * ``original_score``: what the reward function gave the sample's own response (None: no valid score);
      ``original_passed``: whether that passed;
    * ``rng``: a ``random.Random`` seeded by ``--reward-seed``, the probe's name and the sample: use it (not the
      ``random`` module) and the probe is deterministic.
    """

    __slots__ = (
        "_fields",
        "_ground_truth",
        "_messages",
        "_rng",
        "_seed",
        "has_ground_truth",
        "id",
        "line",
        "original_passed",
        "original_score",
        "response",
    )

    def __init__(
        self,
        response: str,
        messages: list[Any],
        *,
        ground_truth: Any = None,
        has_ground_truth: bool = False,
        fields: Mapping[str, Any] | None = None,
        id: str | None = None,
        line: int = 0,
        original_score: float | None = None,
        original_passed: bool = False,
        seed: str = "0",
    ) -> None:
        self.response = response
        self._messages = messages
        self._ground_truth = ground_truth if has_ground_truth else None
        self.has_ground_truth = has_ground_truth and ground_truth is not None
        self._fields = fields or {}
        self.id = id
        self.line = line
        self.original_score = original_score
        self.original_passed = original_passed
        self._seed = seed
        self._rng: random.Random | None = None

    @classmethod
    def _of(
        cls,
        response: str,
        messages: list[Any],
        ground_truth: Any,
        has_ground_truth: bool,
        fields: Mapping[str, Any],
        id: str | None,
        line: int,
        original_score: float | None,
        original_passed: bool,
        prefix: str,
    ) -> ProbeSample:
        """The view a probe run builds for each sample (positional, no defaults to apply; the seed, ``prefix`` and
        the line, is made only when the probe asks for ``rng``)."""
        self = cls.__new__(cls)
        self.response = response
        self._messages = messages
        self._ground_truth = ground_truth if has_ground_truth else None
        self.has_ground_truth = has_ground_truth and ground_truth is not None
        self._fields = fields
        self.id = id
        self.line = line
        self.original_score = original_score
        self.original_passed = original_passed
        self._seed = (prefix, line)
        self._rng = None
        return self

    @property
    def seed(self) -> str:
        """What ``rng`` is seeded with: ``--reward-seed``, the probe's name and the sample's line."""
        seed = self._seed
        if seed.__class__ is tuple:
            self._seed = seed = seed[0] + str(seed[1])
        return seed  # type: ignore[return-value]

    # Imported here: the marker's validation (thresholds) imports this module, and an unrelated run imports nothing
    # heavy (call.py brings the models).
    @property
    def messages(self) -> list[Any]:
        from .call import private_copy

        return private_copy(self._messages)  # type: ignore[no-any-return]

    @property
    def ground_truth(self) -> Any:
        from .call import private_copy

        return private_copy(self._ground_truth)

    @property
    def fields(self) -> dict[str, Any]:
        from .call import private_copy

        return private_copy(dict(self._fields))  # type: ignore[no-any-return]

    @property
    def user(self) -> str | None:
        for message in reversed(self._messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _content_text(message.get("content"))
        return None

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = SeededRandom(self.seed)
        return self._rng

    def __repr__(self) -> str:
        return f"ProbeSample(line={self.line}, id={self.id!r}, response={self.response[:40]!r})"


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def response_text(messages: list[Any] | None) -> str | None:
    """The text of the final assistant turn (multimodal text parts joined); None when the conversation does not end
    with an assistant turn of text (a prompt-only sample, a tool-call turn): nothing to probe."""
    if not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return _content_text(last.get("content"))


def with_response_text(messages: list[Any], text: str) -> list[Any]:
    """``messages`` with the final assistant turn's content replaced by ``text`` (the rest shared, not copied:
    the call copies its inputs)."""
    return [*messages[:-1], {**messages[-1], "content": text}]


# --- built-in mutations ---------------------------------------------------------------------------------------

_JUNK = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")
_WHITESPACE = ("", "", " ", "\n", " \t\n ")


def _empty(response: str, sample: ProbeSample) -> str:
    return sample.rng.choice(_WHITESPACE)


def _echo(response: str, sample: ProbeSample) -> str | None:
    user = sample.user
    return user if user and user.strip() else None


_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.(\d+))?|\.(\d+))$")
_OPTION = re.compile(r"^\(?([A-Za-z])\)?\.?$")


def truth_texts(ground_truth: Any) -> list[str]:
    """The answers a ground truth names, as text: a string or number is one; a list of them, each (the first
    eight); messages, the last one's content. Structured ground truths (dicts) name none."""
    value = ground_truth
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        value = _content_text(value[-1].get("content"))
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, int):
        try:
            return [str(value)]
        except ValueError:  # longer than Python's digit limit
            return []
    if isinstance(value, float):
        return [_number_text(value, None)] if math.isfinite(value) else []
    if isinstance(value, str):
        text = value.strip()
        return [text] if text else []
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for item in value[:8]:
            if isinstance(item, (str, int, float)) and not isinstance(item, bool):
                out += [t for t in truth_texts(item) if t not in out]
        return out
    return []


def _number_text(x: float, decimals: int | None) -> str:
    if decimals is None:
        return repr(x) if x != int(x) or abs(x) >= 1e16 else str(int(x))
    if decimals == 0:
        return str(round(x))
    return f"{x:.{decimals}f}"


def _decoys(truth: str, rng: random.Random) -> list[str]:
    m = _NUMBER.match(truth) if len(truth) <= 30 else None  # longer: no number anyone writes; decoyed as text
    if m is not None:
        digits = m.group(1) or m.group(2)
        decimals = len(digits) if digits else 0
        x = float(truth)
        step = 1.0 if decimals == 0 else 10.0**-decimals
        values = [x - step, x + step, x - 2 * step, x + 2 * step, x * 10, -x if x else 10.0, x + 10 * step]
        return [_number_text(v, decimals) for v in values]
    m = _OPTION.match(truth)
    if m is not None:
        letter = m.group(1)
        base = "A" if letter.isupper() else "a"
        last = max(ord(letter) - ord(base), 4)
        letters = [chr(ord(base) + i) for i in range(last + 1)]
        fmt = truth.replace(letter, "{}", 1)
        return [fmt.format(c) for c in letters if c != letter]
    words = truth.split()
    decoys = ["none of the above", "all of the above", "unknown"]
    if len(words) > 1:
        shuffled = words[:]
        rng.shuffle(shuffled)
        decoys += [" ".join(shuffled), " ".join(words[1:]), " ".join(reversed(words))]
    else:
        decoys += [truth[::-1], truth + truth[-1:], truth[:-1]]
    return decoys


def _stuffing(response: str, sample: ProbeSample) -> str | None:
    truths = truth_texts(sample._ground_truth)
    if not truths:
        return None
    rng = sample.rng
    candidates: list[str] = []
    for truth in truths:
        for decoy in _decoys(truth, rng):
            if decoy and decoy not in truths and decoy not in candidates:
                candidates.append(decoy)
    if len(candidates) < 2:
        candidates += [c for c in ("none of the above", "unknown") if c not in truths]
    draw = rng.getrandbits(64 * (1 + len(candidates) // 8))  # one draw, enough bits to order them all
    for i in range(len(candidates) - 1, 0, -1):  # Fisher-Yates, the index digits read off the draw
        draw, j = divmod(draw, i + 1)
        candidates[i], candidates[j] = candidates[j], candidates[i]
    for truth in truths:  # never first nor last: a reward reading one answer (first or last) reads a decoy
        draw, k = divmod(draw, len(candidates) - 1)
        candidates.insert(1 + k, truth)
    return "The answer could be " + ", or ".join(candidates) + "."


def _repeat(response: str, sample: ProbeSample) -> str | None:
    if not response.strip():
        return None
    return "\n\n".join([response.strip()] * 3)


# format_only: the structure of a response with junk inside.
_STRUCTURE = re.compile(r"```|\\boxed\s*\{|<([A-Za-z][\w:.-]*)(?:\s[^<>]*)?>")
_MAX_DEPTH = 8


def _junk(rng: random.Random, n: int = 3) -> str:
    return " ".join(rng.choice(_JUNK) for _ in range(n))


def _junk_json(value: Any, rng: random.Random, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {k: _junk_json(v, rng, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_junk_json(value[0], rng, depth + 1)] if value else []
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, str):
        return rng.choice(_JUNK)
    return None


def _json_skeleton(text: str, rng: random.Random) -> str | None:
    stripped = text.strip()
    if stripped[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, (dict, list)):
        return None
    return json.dumps(_junk_json(value, rng), ensure_ascii=False)


def _brace_pairs(text: str) -> dict[int, int]:
    """For each ``{`` of ``text`` that is closed, the index of its ``}`` (one pass, whatever the nesting)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def _separator(gap: str) -> str:
    if not gap.strip():
        return gap
    return "\n" if "\n" in gap else " "


def _skeleton(text: str, rng: random.Random, depth: int = 0) -> str | None:
    """``text``'s structural elements, in order, each with junk inside (nested structure kept); the text between
    them dropped (whitespace kept). None when there is no structure."""
    whole = _json_skeleton(text, rng)
    if whole is not None:
        return whole
    out: list[str] = []
    i, found = 0, False
    braces: dict[int, int] | None = None
    unclosed: set[str] = (
        set()
    )  # tags with no closing tag after the first opening: none after later ones either
    while (m := _STRUCTURE.search(text, i)) is not None:
        start, opened = m.start(), m.end()
        gap = text[i:start]
        if m.group(0) == "```":
            end = text.find("```", opened)
            if end < 0:
                break
            newline = text.find("\n", opened, end)
            lang = text[opened:newline] if newline >= 0 else ""
            body = text[newline + 1 : end] if newline >= 0 else text[opened:end]
            inner = _json_skeleton(body, rng) if lang.strip().lower() == "json" else None
            piece = f"```{lang}\n{inner if inner is not None else _junk(rng)}\n```"
            i = end + 3
        elif m.group(1) is None:  # \boxed{
            if braces is None:
                braces = _brace_pairs(text)
            close = braces.get(opened - 1, -1)
            if close < 0:
                i = opened
                continue
            piece = text[start:opened] + rng.choice(_JUNK) + "}"
            i = close + 1
        else:
            name = m.group(1)
            close = -1 if name in unclosed else text.find(f"</{name}>", opened)
            if close < 0:
                unclosed.add(name)
                i = opened
                continue
            inner_text = text[opened:close]
            inner = _skeleton(inner_text, rng, depth + 1) if depth < _MAX_DEPTH else None
            content = inner.strip() if inner is not None else _junk(rng)
            lead = inner_text[: len(inner_text) - len(inner_text.lstrip())]
            trail = inner_text[len(inner_text.rstrip()) :] if inner_text.strip() else ""
            piece = f"{m.group(0)}{lead}{content}{trail}</{name}>"
            i = close + len(name) + 3
        if found:
            out.append(_separator(gap))
        out.append(piece)
        found = True
    return "".join(out) if found else None


def _format_only(response: str, sample: ProbeSample) -> str | None:
    return _skeleton(response, sample.rng)


# truncate: where the final answer begins.
_ANSWER_MARKER = re.compile(
    r"<answer>|\\boxed\s*\{|####|\b(?:the\s+)?(?:final\s+answer\b|answer\s*(?:is\b|:))|\btherefore\b",
    re.IGNORECASE,
)
#: How far before the answer itself an answer marker may start and still open it ("The final answer is \boxed{").
_MARKER_REACH = 60


def answer_start(response: str, ground_truth: Any) -> int:
    """Where the response's answer begins, its marker included (``The answer is``, ``\\boxed{``, ``<answer>``,
    ``####``, ``Therefore``); -1 when it cannot be told. With a ground truth found in the response: its *first*
    occurrence (cut there, the response never states the answer); otherwise the last answer marker."""
    markers = [m.start() for m in _ANSWER_MARKER.finditer(response)]
    found = [k for k in (response.find(t) for t in truth_texts(ground_truth)) if k >= 0]
    pos = min(found) if found else (markers[-1] if markers else -1)
    if pos < 0:
        return -1
    opening = [k for k in markers if k <= pos and pos - k <= _MARKER_REACH]
    return min(opening) if opening else pos


def _truncate(response: str, sample: ProbeSample) -> str | None:
    cut = answer_start(response, sample._ground_truth)
    return None if cut < 0 else response[:cut].rstrip()


_CASE_TOKEN = re.compile(r"```.*?```|\\[A-Za-z]+|<[^<>\n]*>|[^\W\d_]+", re.DOTALL)


def _case(response: str, sample: ProbeSample) -> str | None:
    modes = [str.upper, str.lower, str.swapcase]
    sample.rng.shuffle(modes)

    def change(mode: Callable[[str], str]) -> str:
        def word(m: re.Match[str]) -> str:
            token = m.group(0)
            if token.startswith(("```", "\\", "<")):
                return token
            return mode(token)

        return _CASE_TOKEN.sub(word, response)

    for mode in modes:
        changed = change(mode)
        if changed != response:
            return changed
    return None


_FENCE = re.compile(r"(```.*?```)", re.DOTALL)
_INNER_SPACE = re.compile(r"(?<=\S) (?=\S)")


def _whitespace(response: str, sample: ProbeSample) -> str | None:
    parts = _FENCE.split(response)
    spaced = "".join(p if i % 2 else _INNER_SPACE.sub("  ", p) for i, p in enumerate(parts))
    lead, trail = sample.rng.choice((" ", "\n", "\n ", "  ")), sample.rng.choice((" ", "\n", " \n", "\n\n"))
    return lead + spaced + trail


def _ground_truth_leak(response: str, sample: ProbeSample) -> str | None:
    if sample.original_passed:
        return None
    truths = truth_texts(sample._ground_truth)
    if not truths:
        return None
    truth = truths[0]
    cut = answer_start(response, None)
    head = response if cut < 0 else response[:cut]
    tail = response[cut:] if cut >= 0 else ""
    if "<answer>" in tail:
        answer = f"<answer>{truth}</answer>"
    elif "\\boxed" in tail:
        answer = f"\\boxed{{{truth}}}"
    elif "####" in tail:
        answer = f"#### {truth}"
    else:
        answer = f"The answer is {truth}."
    return f"{head.rstrip()}\n{answer}".lstrip("\n")


# --- probes and the registry -----------------------------------------------------------------------------------

Mutation = Callable[[str, ProbeSample], "str | None"]


@dataclass(frozen=True)
class Probe:
    """A named mutation and its default rule."""

    name: str
    mutate: Mutation
    rule: Rule
    doc: str
    """Why the rule must hold (one sentence; reports show it)."""
    builtin: bool = False
    needs: str = ""
    """What a sample needs for the probe to apply (said when it applies to none)."""

    @property
    def where(self) -> str:
        """Where the mutation is defined (``module.function``)."""
        fn = self.mutate
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _builtin(name: str, mutate: Mutation, rule: str, doc: str, needs: str) -> Probe:
    return Probe(name, mutate, parse_rule(rule), doc, builtin=True, needs=needs)


BUILTIN_PROBES: dict[str, Probe] = {
    p.name: p
    for p in (
        _builtin("empty", _empty, "<= floor", "an empty or whitespace response must not be paid", "nothing"),
        _builtin(
            "echo", _echo, "<= floor", "repeating the user's message is no answer", "a user turn of text"
        ),
        _builtin(
            "stuffing",
            _stuffing,
            "not pass",
            "listing many candidate answers (the truth among decoys) must not pass",
            "a ground truth naming an answer (a string or a number)",
        ),
        _builtin(
            "repeat",
            _repeat,
            "<= original",
            "saying the same thing three times must not pay more",
            "a response",
        ),
        _builtin(
            "format_only",
            _format_only,
            "<= floor",
            "the expected structure (tags, \\boxed{}, JSON, code fences) with junk inside earns nothing",
            "structure in the response: tags, \\boxed{}, JSON or code fences",
        ),
        _builtin(
            "truncate",
            _truncate,
            "not pass",
            "a response cut before its final answer must not pass",
            "an answer to find: the ground truth in the response, or an answer marker",
        ),
        _builtin(
            "case",
            _case,
            "== original",
            "declared case-invariant: changing letters' case keeps the score",
            "letters outside code, tags and LaTeX commands",
        ),
        _builtin(
            "whitespace",
            _whitespace,
            "== original",
            "declared whitespace-invariant: doubling spaces and padding keeps the score",
            "nothing",
        ),
        _builtin(
            "ground_truth_leak",
            _ground_truth_leak,
            "info",
            "a failing response with its final answer replaced by the ground truth: does the reward grade the "
            "reasoning, or only the answer?",
            "a failing response and a ground truth naming an answer",
        ),
    )
}
DEFAULT_PROBES: tuple[str, ...] = ("empty", "echo", "stuffing", "repeat", "format_only", "truncate")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_DECORATED: dict[str, Probe] = {}


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name == "default":
        raise ValueError(
            f"a probe name must be a word (letters, digits, '_', '.', '-'), not 'default', got {name!r}"
        )
    if name in BUILTIN_PROBES:
        raise ValueError(f"probe {name!r} is a built-in probe; give yours another name")
    return name


def _make(name: Any, mutate: Any, rule: Any, doc: str | None) -> Probe:
    name = _check_name(name)
    if not callable(mutate):
        raise TypeError(f"probe {name!r}: the mutation must be a function (response, sample) -> str | None")
    try:
        parsed = parse_rule(rule)
    except GateError as exc:
        raise ValueError(f"probe {name!r}: {exc}") from None
    text = doc if doc is not None else (getattr(mutate, "__doc__", None) or "").strip().split("\n")[0]
    return Probe(name, mutate, parsed, text or "(custom probe)")


def probe(name: str | None = None, *, rule: str, doc: str | None = None) -> Callable[[Mutation], Mutation]:
    """Register a custom probe: a function ``(response: str, sample: ProbeSample) -> str | None`` returning the
    mutated response (None: the probe does not apply to this sample). ``rule``: ``"<= floor"``, ``"<= original"``,
    ``"== original"``, ``"not pass"`` or ``"info"`` (see :mod:`pytest_reward.probes`); ``name`` defaults to the
    function's, ``doc`` (why the rule must hold) to the first line of its docstring. A reward function runs it
    when its marker lists it: ``@pytest.mark.reward(probes=["default", "negate"])``.

    Registered for the whole process (defining the function again replaces it, as a re-imported module does).
    """

    def register(fn: Mutation) -> Mutation:
        made = _make(name if name is not None else getattr(fn, "__name__", None), fn, rule, doc)
        _DECORATED[made.name] = made
        return fn

    return register


def decorated_probes() -> dict[str, Probe]:
    """The probes registered with :func:`probe` so far."""
    return dict(_DECORATED)


class ProbeRegistry:
    """The probes a session knows: the built-ins, the decorated ones and those ``pytest_reward_probes`` adds."""

    def __init__(self, probes: Mapping[str, Probe] | None = None) -> None:
        self._probes: dict[str, Probe] = dict(BUILTIN_PROBES)
        self._probes.update(probes if probes is not None else decorated_probes())

    def register(self, name: str, mutate: Mutation, *, rule: str, doc: str | None = None) -> None:
        """Add a probe (see :func:`probe`); a name registered before is replaced, a built-in's is refused."""
        made = _make(name, mutate, rule, doc)
        self._probes[made.name] = made

    def get(self, name: str) -> Probe | None:
        return self._probes.get(name)

    def names(self) -> list[str]:
        return list(self._probes)

    def resolve(self, declared: Iterable[tuple[str, str | None]], where: str) -> list[tuple[Probe, Rule]]:
        """The probes a marker declared (names, with a rule or None for the probe's own) and their rules;
        ``GateError`` naming ``where`` for an unknown name."""
        out = []
        for name, rule in declared:
            found = self._probes.get(name)
            if found is None:
                close = difflib.get_close_matches(name, self.names(), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise GateError(
                    f"{where}: unknown probe {name!r}{hint}; known probes: {', '.join(self.names())} "
                    "(register your own with @pytest_reward.probe or the pytest_reward_probes hook)"
                )
            out.append((found, parse_rule(rule) if rule is not None else found.rule))
        return out
