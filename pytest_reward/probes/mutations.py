"""What a mutation sees (:class:`ProbeSample`, a seeded RNG) and the built-in mutations."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Mapping
from typing import Any

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
        from ..reward.call import private_copy

        return private_copy(self._messages)  # type: ignore[no-any-return]

    @property
    def ground_truth(self) -> Any:
        from ..reward.call import private_copy

        return private_copy(self._ground_truth)

    @property
    def fields(self) -> dict[str, Any]:
        from ..reward.call import private_copy

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


