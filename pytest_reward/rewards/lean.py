"""``lean_prover_reward``: heuristic scoring of a Lean proof *text* (it does not run Lean)."""

from __future__ import annotations

import re
from typing import Any

from ..decorator import reward_function
from ..models import EvaluateResult, Message
from ._common import assistant_text, invalid, metric

_DEFINITION = re.compile(
    r"\b(?:theorem|lemma)\s+[\w.']+(\s*\{[^}]*\})?(\s*\([^)]*\))?[^\n]*?:=?|\bexample\s*(\{[^}]*\})?(\s*\([^)]*\))?[^\n]*?:=?"
)
_SORRY = re.compile(r"\b(?:sorry|admit|admitted)\b")
_COMMENT = re.compile(r"--[^\n]*|/-.*?-/", re.DOTALL)
_TACTICS = {
    "have_statement": re.compile(r"\bhave\s+\w+(\s*:\s*[^:=]+)?\s*:="),
    "apply_tactic": re.compile(r"\bapply\s+[\w.]+"),
    "intro_tactic": re.compile(r"\bintros?\s+\w+"),
    "rw_tactic": re.compile(r"\brw\s+\[[^\]]*\]"),
    "simp_tactic": re.compile(r"\bsimp(?:_all)?\b(\s+\[[^\]]*\])?"),
    "exact_tactic": re.compile(r"\bexact\s+[\w.(]+"),
    "calc_block": re.compile(r"\bcalc\s+"),
}


@reward_function
def lean_prover_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: str | None,
    **kwargs: Any,
) -> EvaluateResult:
    """Heuristic score of a Lean 4 proof attempt; ``kwargs["statement"]`` (the theorem statement) is required.

    * no ``theorem``/``lemma``/``example`` and no tactic: 0.0;
    * a definition whose proof contains ``sorry``/``admit``: 0.1 + 0.03 per tactic, at most 0.4
      (``check_partial_progress=False``: 0.1);
    * a definition without them: 0.5 + 0.08 per tactic, at most 0.9;
    * the expected proof (``ground_truth``) found in the response, and no ``sorry``: 1.0.

    Metrics (always; reward-kit only with ``verbose=True``): ``syntax``, ``completeness``, ``tactics`` and,
    with a ground truth, ``expected_match``.

    Differences from reward-kit (deliberate): a proof containing ``sorry`` never scores 1.0 (reward-kit gave
    1.0 whenever the expected proof text appeared, ``sorry`` or not); ``sorry`` and tactics inside comments,
    and words that merely contain them (``sorryless``), are ignored;
    tactics need word boundaries (``exact`` no longer matches ``inexact``).
    """
    statement = kwargs.get("statement")
    if not statement:
        return invalid("Statement not provided in kwargs.")
    text, why = assistant_text(messages)
    if text is None:
        return invalid(why)
    check_partial_progress = bool(kwargs.get("check_partial_progress", True))
    code = _COMMENT.sub(" ", text)
    has_definition = bool(_DEFINITION.search(code))
    incomplete = bool(_SORRY.search(code))
    tactics = sum(len(pattern.findall(code)) for pattern in _TACTICS.values())
    if not has_definition and tactics == 0:
        score, reason = 0.0, "No valid Lean proof attempt"
    elif has_definition and incomplete:
        if check_partial_progress:
            score, reason = min(0.4, 0.1 + (tactics / 10) * 0.3), f"Incomplete proof with {tactics} tactics"
        else:
            score, reason = 0.1, "Incomplete proof (has sorry/admitted)"
    elif has_definition:
        score = 0.5 + min(tactics, 5) / 5 * 0.4
        reason = f"Complete proof with {'good complexity (' if tactics >= 5 else ''}{tactics} tactics{')' if tactics >= 5 else ''}"
    else:
        score, reason = 0.0, "Tactics without a theorem, lemma or example definition"
    expected_match = bool(ground_truth) and str(ground_truth).strip().lower() in text.lower()
    if expected_match and not incomplete:
        score, reason = 1.0, "Perfect match with expected proof"
    metrics = {
        "syntax": metric(
            float(has_definition),
            "Has valid theorem definition" if has_definition else "Missing theorem definition",
        ),
        "completeness": metric(
            0.0 if incomplete else 1.0,
            "Incomplete proof (has sorry/admitted)" if incomplete else "Complete proof",
        ),
        "tactics": metric(tactics / 10, f"Used {tactics} tactics"),
    }
    if ground_truth:
        metrics["expected_match"] = metric(
            float(expected_match),
            "Matches expected proof" if expected_match else "Doesn't match expected proof",
        )
    return EvaluateResult(score=score, reason=reason, metrics=metrics)
