"""Probes by name: the built-ins, ``@probe`` and the session's registry."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import GateError
from .answers import (
    ANSWER_FORMATS,
    _duplicate_block,
    _extra_close_tag,
    _longer,
    _multiline,
    _neutral_prefix,
    _neutral_tail,
    _shorter,
    _stuffing_pair,
    _think_removed,
    _think_wrapped,
    restated,
)
from .code import _code_exit0, _code_hardcoded
from .mutations import (
    ProbeSample,
    _case,
    _echo,
    _empty,
    _format_only,
    _ground_truth_leak,
    _repeat,
    _stuffing,
    _truncate,
    _whitespace,
)
from .rules import Rule, parse_rule

# --- probes and the registry -----------------------------------------------------------------------------------


class RewardAbstainWarning(UserWarning):
    """A reward function gives no valid score to any response of some prompt (check ``abstaining_groups``)."""


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
    batching: str = ""
    """How the probe's responses are batched, for a check whose mutation is the identity: ``"reversed"`` (a batch
    function's samples scored in the reverse order, so each in another batch, at another position, beside other
    neighbours), ``"alone"`` (each in a batch of its own), ``"groups"`` (nothing scored again: the samples' own
    scores, grouped by prompt); ``""``: a mutation, scored as the samples are."""

    @property
    def where(self) -> str:
        """Where the mutation is defined (``module.function``)."""
        fn = self.mutate
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _builtin(name: str, mutate: Mutation, rule: str, doc: str, needs: str, batching: str = "") -> Probe:
    return Probe(name, mutate, parse_rule(rule), doc, builtin=True, needs=needs, batching=batching)


def _same(response: str, sample: ProbeSample) -> str:
    return response


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
        # --- rewards wrong for good answers (docs/reward-bugs.md) ---
        _builtin(
            "stuffing_pair",
            _stuffing_pair,
            "not pass",
            'two candidate answers, the truth second ("41 or 42", "41 and 42"), must not pass',
            "a ground truth that is a number or an option letter",
        ),
        _builtin(
            "neutral_tail",
            _neutral_tail,
            ">= original",
            "a neutral paragraph after the response must not lower its score (an answer read from a window of "
            "the last characters is pushed out)",
            "a response",
        ),
        _builtin(
            "neutral_prefix",
            _neutral_prefix,
            ">= original",
            "a neutral paragraph of reasoning before the response must not lower its score",
            "a response",
        ),
        *(
            _builtin(
                f"format.{fmt}",
                restated(fmt),
                "info",
                f"a passing response's answer restated as {write('X')!r}: does the reward accept that format?",
                "a passing response with a ground truth naming an answer, not already in this format",
            )
            for fmt, write in ANSWER_FORMATS.items()
        ),
        _builtin(
            "think_removed",
            _think_removed,
            "== original",
            "the response without its <think> block: the answer's score must not depend on the thinking",
            "a <think> block and text outside it",
        ),
        _builtin(
            "think_wrapped",
            _think_wrapped,
            "== original",
            "the response's reasoning wrapped in a <think> block: the answer's score must not depend on it",
            "a response without <think>",
        ),
        _builtin(
            "multiline",
            _multiline,
            "== original",
            "the tagged blocks' content over several lines: a regex without re.DOTALL must not zero it",
            "a tagged block (<think>, <answer>...) whose content is on one line",
        ),
        _builtin(
            "duplicate_block",
            _duplicate_block,
            "not pass",
            "the last tagged block twice (two <answer> blocks) is malformed and must not pass",
            "a tagged block (<think>, <answer>...)",
        ),
        _builtin(
            "extra_close_tag",
            _extra_close_tag,
            "not pass",
            "a stray closing tag after the last block (<answer>42</answer></answer>) is malformed and must not "
            "pass",
            "a tagged block (<think>, <answer>...)",
        ),
        _builtin(
            "length.longer",
            _longer,
            "info",
            "the response with a neutral paragraph after it: longer, the same answer (a direction=... check)",
            "a response",
        ),
        _builtin(
            "length.shorter",
            _shorter,
            "info",
            "the first half of the response's words: shorter (a direction=... check)",
            "a response of two words or more",
        ),
        _builtin(
            "batch_order",
            _same,
            "== original",
            "each response scored again with the file in the reverse order: a batch reward's score must not depend "
            "on the sample's position or its neighbours (a shifted list of scores)",
            "a batch-mode reward function (TRL-style lists)",
            batching="reversed",
        ),
        _builtin(
            "batch_alone",
            _same,
            "== original",
            "each response scored again in a batch of its own: a batch reward's score must not depend on the "
            "other samples of its batch",
            "a batch-mode reward function (TRL-style lists)",
            batching="alone",
        ),
        _builtin(
            "abstaining_groups",
            _same,
            "info",
            "the responses to one prompt that all have no valid score (a TRL reward returning None for each) "
            "poison the group's normalisation: warned by default; a rule other than info fails on them",
            "two responses or more to one prompt",
            batching="groups",
        ),
        _builtin(
            "reference",
            _same,
            "info",
            "each response scored by the marker's reference= function too: the samples they disagree on (both "
            "scores, both reasons); the agreement= gate fails a share of agreement below it",
            "a reference= in the marker",
            batching="reference",
        ),
        _builtin(
            "code.exit0",
            _code_exit0,
            "not pass",
            "a program that exits 0 and prints nothing must not pass",
            "a fenced Python or JavaScript code block",
        ),
        _builtin(
            "code.hardcoded",
            _code_hardcoded,
            "not pass",
            "a program that prints the (first) expected output verbatim, computing nothing, must not pass",
            "a fenced Python or JavaScript code block and an expected output in the ground truth",
        ),
    )
}
DEFAULT_PROBES: tuple[str, ...] = (
    "empty",
    "echo",
    "stuffing",
    "repeat",
    "format_only",
    "truncate",
    "stuffing_pair",
)
#: Names a marker's ``probes=`` list expands to a set of probes (each keeps its own rule).
PROBE_GROUPS: dict[str, tuple[str, ...]] = {
    "default": DEFAULT_PROBES,
    "neutral": ("neutral_tail", "neutral_prefix"),
    "formats": tuple(f"format.{fmt}" for fmt in ANSWER_FORMATS),
    "think": ("think_removed", "think_wrapped"),
    "tags": ("multiline", "duplicate_block", "extra_close_tag"),
    "code": ("code.exit0", "code.hardcoded"),
    "batch": ("batch_order", "batch_alone", "abstaining_groups"),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_DECORATED: dict[str, Probe] = {}


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name in PROBE_GROUPS:
        raise ValueError(
            "a probe name must be a word (letters, digits, '_', '.', '-'), not a group's name "
            f"({', '.join(PROBE_GROUPS)}), got {name!r}"
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
    ``"== original"``, ``">= original"``, ``"not pass"`` or ``"info"`` (see :mod:`pytest_reward.probes`); ``name``
    defaults to the function's, ``doc`` (why the rule must hold) to the first line of its docstring. A reward function runs it
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
