"""Mutations that keep a response's answer and change how it is written, and the two-candidate form of stuffing.

These catch the other family of reward bugs: rewards that are wrong for *good* answers. Each was shipped in a widely
used trainer or reward library (``docs/reward-bugs.md`` cites them): an answer read from a window of the last N
characters (a neutral tail pushes it out), one answer format accepted and the others silently scored 0, a score of
0 unless a ``</think>`` is present, a format regex without ``re.DOTALL`` that fails multi-line content, a format
reward that still pays for duplicated blocks, a verifier that accepts "1331 and 1728" for 1728.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .mutations import _NUMBER, _OPTION, ProbeSample, _number_text, answer_start, truth_texts

# --- neutral text around a correct response -------------------------------------------------------------------

#: Neither numbers, nor answer markers, nor tags: text that changes nothing a grader should read. Long enough
#: (about 700 characters) to push an answer out of a window of the last few hundred characters.
NEUTRAL_PARAGRAPH = (
    "I hope this explanation is clear. To summarise the approach once more in words: we read the question "
    "carefully, identified the quantities involved, worked through each step in order and checked that every "
    "intermediate step follows from the one before it. If any part of the reasoning seems unclear, it may help to "
    "reread the relevant step slowly, perhaps with pen and paper, since the same method applies to many similar "
    "problems. It is always worth double-checking the units, the wording of the question and any assumptions that "
    "were made along the way, because small slips in reading are a common source of mistakes. Thank you for the "
    "interesting question; working through problems like this one is a good way to build intuition."
)
NEUTRAL_TAIL = NEUTRAL_PARAGRAPH + " Let me know if you need anything else."
NEUTRAL_PREFIX = (
    "Let me think about this step by step before writing anything down. First I will restate the problem in my "
    "own words so that nothing is missed, then I will decide which method fits it best, and finally I will carry "
    "the method out carefully, checking each step as I go. It is easy to rush a problem like this one, so I will "
    "be deliberate: read every condition, keep track of what is given and what is asked, and avoid skipping steps "
    "that seem obvious, because the obvious steps are where small slips usually hide. With that plan in place, "
    "here is the worked solution."
)


def _neutral_tail(response: str, sample: ProbeSample) -> str | None:
    if not response.strip():
        return None
    return f"{response.rstrip()}\n\n{NEUTRAL_TAIL}"


def _neutral_prefix(response: str, sample: ProbeSample) -> str | None:
    if not response.strip():
        return None
    return f"{NEUTRAL_PREFIX}\n\n{response.lstrip()}"


# --- the answer restated in another format ---------------------------------------------------------------------

#: Each answer format a reward may read: its probe's suffix, and how it is written.
ANSWER_FORMATS: dict[str, Callable[[str], str]] = {
    "hash": lambda a: f"#### {a}",
    "boxed": lambda a: f"The final answer is $\\boxed{{{a}}}$.",
    "answer_is": lambda a: f"The answer is {a}.",
    "answer_colon": lambda a: f"Answer: {a}",
    "answer_tag": lambda a: f"<answer>{a}</answer>",
}
#: The marker of each format, one group per format (named as its key), in one pattern: one scan of a response.
_WRITTEN = re.compile(
    r"(?P<hash>####)|(?P<boxed>\\boxed\s*\{)|(?P<answer_is>\b(?:final\s+)?answer\s+is\b)"
    r"|(?P<answer_colon>\banswer\s*:)|(?P<answer_tag><answer>)",
    re.IGNORECASE,
)


def _written_in(response: str) -> str | None:
    """The format the response's final answer is written in (the one whose marker comes last), or None."""
    last = None
    for last in _WRITTEN.finditer(response):  # noqa: B007 (the last match is the one wanted)
        pass
    return None if last is None else last.lastgroup


def _reasoning(response: str, sample: ProbeSample | None) -> str:
    """The response before its final answer, stripped: before the last answer marker (``<answer>``, ``\\boxed{``,
    ``####``, ``The answer is``...); without one, the whole response, or with a ``sample``, the response before
    its first mention of the ground truth (so that it does not state the answer)."""
    cut = answer_start(response, None)
    if cut < 0 and sample is not None:
        cut = answer_start(response, sample._ground_truth)
    return (response if cut < 0 else response[:cut]).strip()


def restated(fmt: str) -> Callable[[str, ProbeSample], str | None]:
    """The mutation of probe ``format.<fmt>``: a passing response's reasoning, then its ground truth in that
    format. None for a sample whose own response fails (a wrong answer says nothing about formats), has no ground
    truth naming an answer, or is already written in ``fmt``."""
    write = ANSWER_FORMATS[fmt]

    def mutate(response: str, sample: ProbeSample) -> str | None:
        if not sample.original_passed:
            return None
        truths = truth_texts(sample._ground_truth)
        if not truths or _written_in(response) == fmt:
            return None
        head = _reasoning(response, None)
        return f"{head}\n\n{write(truths[0])}".lstrip()

    mutate.__name__ = mutate.__qualname__ = f"format_{fmt}"
    return mutate


# --- <think> blocks --------------------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def _think_removed(response: str, sample: ProbeSample) -> str | None:
    if "<think>" not in response:
        return None
    out = _THINK.sub("", response).strip()
    return out if out and out != response.strip() else None


def _think_wrapped(response: str, sample: ProbeSample) -> str | None:
    if "<think>" in response or "</think>" in response or not response.strip():
        return None
    cut = answer_start(response, None)
    head, tail = (response[:cut], response[cut:]) if cut > 0 else ("", response)
    thinking = head.strip() or "Let me work this out."
    return f"<think>\n{thinking}\n</think>\n\n{tail.strip()}"


# --- tag formats: multi-line content, duplicated blocks, an extra closing tag ------------------------------------

_PAIR = re.compile(r"<([A-Za-z][\w-]*)>(.*?)</\1>", re.DOTALL)


def _multiline(response: str, sample: ProbeSample) -> str | None:
    """Every tagged block whose content is on one line, with its content on lines of its own (and, with a space in
    it, over two lines)."""

    def split(m: re.Match[str]) -> str:
        name, content = m.group(1), m.group(2)
        if "\n" in content or not content.strip():
            return m.group(0)
        inner = content.strip()
        words = inner.split(" ", 1)
        body = "\n".join(words) if len(words) == 2 and words[1].strip() else inner
        return f"<{name}>\n{body}\n</{name}>"

    out = _PAIR.sub(split, response)
    return out if out != response else None


def _last_block(response: str) -> re.Match[str] | None:
    last = None
    for m in _PAIR.finditer(response):
        last = m
    return last


def _duplicate_block(response: str, sample: ProbeSample) -> str | None:
    block = _last_block(response)
    if block is None:
        return None
    return response[: block.end()] + "\n" + block.group(0) + response[block.end() :]


def _extra_close_tag(response: str, sample: ProbeSample) -> str | None:
    block = _last_block(response)
    if block is None:
        return None
    return response[: block.end()] + f"</{block.group(1)}>" + response[block.end() :]


# --- two candidates, the truth second ----------------------------------------------------------------------------


def _pair_decoy(truth: str) -> str | None:
    """The decoy beside ``truth``: the number one step below it (in its last decimal place), or the option letter
    before it (after it for A); None for a truth that is neither."""
    m = _NUMBER.match(truth) if len(truth) <= 30 else None
    if m is not None:
        digits = m.group(1) or m.group(2)
        decimals = len(digits) if digits else 0
        return _number_text(float(truth) - (1.0 if decimals == 0 else 10.0**-decimals), decimals)
    m = _OPTION.match(truth)
    if m is not None:
        letter = m.group(1)
        other = chr(ord(letter) + 1) if letter in "Aa" else chr(ord(letter) - 1)
        return truth.replace(letter, other, 1)
    return None


def _stuffing_pair(response: str, sample: ProbeSample) -> str | None:
    """A decoy, then the ground truth, joined by "or" (odd lines) or "and" (even lines) and written in the
    response's answer format (``\\boxed{41 or 42}``, ``<answer>41 and 42</answer>``): a verifier that accepts any of
    several answers, or reads the last number of the answer, passes it. Only for a ground truth that is a number or
    an option letter: a longer one (a proof, a sentence) is no answer a policy would list beside another."""
    truths = truth_texts(sample._ground_truth)
    decoy = _pair_decoy(truths[0]) if truths else None
    if decoy is None or decoy in truths:
        return None
    fmt = _written_in(response) or "answer_is"
    answer = ANSWER_FORMATS[fmt](decoy + (" or " if sample.line % 2 else " and ") + truths[0])
    return f"{_reasoning(response, sample)}\n\n{answer}".lstrip()


# --- a feature varied for a declared direction (marker ``direction={"length": "+"}``) -----------------------------


def _longer(response: str, sample: ProbeSample) -> str | None:
    if not response.strip():
        return None
    return f"{response.rstrip()}\n\n{NEUTRAL_PARAGRAPH}"


def _shorter(response: str, sample: ProbeSample) -> str | None:
    words = response.split(" ")
    if len(words) < 2:
        return None
    return " ".join(words[: len(words) // 2]).rstrip()


#: The features a marker's ``direction=`` may name: each the probes that vary it, the first making it grow.
DIRECTION_FEATURES: dict[str, tuple[str, str]] = {"length": ("length.longer", "length.shorter")}


def direction_probes(feature: str, sign: str) -> list[tuple[str, str]]:
    """The probes and rules that check ``feature`` moves the score the ``sign`` way (``+``: up as it grows)."""
    grows, shrinks = DIRECTION_FEATURES[feature]
    up, down = (">= original", "<= original") if sign == "+" else ("<= original", ">= original")
    return [(grows, up), (shrinks, down)]
