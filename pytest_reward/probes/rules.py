"""A probe's rule: how the score of a mutated response is judged against the original's (the forms are
listed in :mod:`pytest_reward.probes`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import GateError

# --- rules ---------------------------------------------------------------------------------------------------

#: Scores within this (relative to the larger magnitude, at least absolute) count as equal: float rounding only.
EPS = 1e-9

_RULE = re.compile(
    r"^\s*(?:(?P<op><=|==|>=)\s*(?P<ref>floor|original)(?:\s*(?P<sign>\+/-|\+-|±|\+|-)\s*(?P<tol>\d+(?:\.\d*)?|\.\d+))?"
    r"|(?P<word>not\s+pass|info))\s*$"
)
RULE_FORMS = ('"<= floor"', '"<= original"', '"== original"', '">= original"', '"not pass"', '"info"')
#: The sign a tolerance takes in each rule form (what :attr:`Rule.text` writes and :func:`parse_rule` accepts).
#: (``<=`` and ``==`` keep taking any of the older signs; a ``>=`` rule's tolerance lowers the bound, so ``-``.)
_SIGNS = {"<=": ("+", "±", "+-", "+/-"), "==": ("±", "+", "+-", "+/-"), ">=": ("-",)}


@dataclass(frozen=True, slots=True)
class Rule:
    """A probe's rule (see the module docstring), parsed from its text by :func:`parse_rule`."""

    kind: str
    """``<=``, ``==``, ``>=``, ``not pass`` or ``info``."""
    ref: str | None = None
    """``floor`` or ``original`` (``<=``, ``==`` and ``>=`` rules)."""
    tol: float = 0.0

    @property
    def text(self) -> str:
        if self.ref is None:
            return self.kind
        if not self.tol:
            return f"{self.kind} {self.ref}"
        return f"{self.kind} {self.ref} {_SIGNS[self.kind][0]} {self.tol:g}"

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
        if kind == ">=":  # a response with no valid score lost what the original had (unless it had none)
            if score is None:
                return self.ref == "original" and original is None
            return score >= ref - self.tol - _eps(score, ref)
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
        if self.kind == ">=":
            if score is None:
                return f"no valid score where the {name} scored {_g(ref)}"
            return f"score {_g(score)} < {name} {_g(ref)}" + (f" - {self.tol:g}" if self.tol else "")
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
            f"unknown probe rule {text!r}; rules: {', '.join(RULE_FORMS)}, the first four with an optional "
            'tolerance ("<= original + 0.05", "== original ± 0.02", ">= original - 0.05")'
        )
    if m.group("word"):
        return Rule(" ".join(m.group("word").split()))
    op, ref, sign = m.group("op"), m.group("ref"), m.group("sign")
    if sign is not None and sign not in _SIGNS[op]:
        raise GateError(
            f"probe rule {text!r}: a {op!r} rule's tolerance is written {_SIGNS[op][0]!r}, "
            f'e.g. "{op} {ref} {_SIGNS[op][0]} 0.05"'
        )
    tol = float(m.group("tol")) if m.group("tol") else 0.0
    return Rule(op, ref, tol)


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


