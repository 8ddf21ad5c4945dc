"""``lean_prover_reward``: heuristic scoring of a Lean proof *text* (it does not run Lean);
``deepseek_prover_v2_reward``: the same, with a bonus for a proof decomposed into subgoals."""

from __future__ import annotations

import re
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message
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
    * the expected proof (``ground_truth``) found in the proof — in the code of a response that states a
      ``theorem``/``lemma``/``example`` (comments aside, whitespace normalised) — and no ``sorry``: 1.0.

    Metrics (always; reward-kit only with ``verbose=True``): ``syntax``, ``completeness``, ``tactics`` and,
    with a ground truth, ``expected_match``.

    Differences from reward-kit (deliberate): a proof containing ``sorry`` never scores 1.0 (reward-kit gave
    1.0 whenever the expected proof text appeared, ``sorry`` or not); the expected proof counts only inside a
    stated proof, not in a comment or in prose (reward-kit gave 1.0 to any text containing it: the ``stuffing``
    probe's list of candidate tactics scored 1.0 without a theorem); ``sorry`` and tactics inside comments,
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
    expected = " ".join(_COMMENT.sub(" ", str(ground_truth)).split()).lower() if ground_truth else ""
    expected_match = bool(expected) and has_definition and expected in " ".join(code.split()).lower()
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


# Subgoal steps, in the spirit of DeepSeek-Prover-V2 (decompose a proof into lemmas proved one by one).
_SUBGOALS = {
    "have": re.compile(r"\bhave\s+(?:[\w']+\s*)?:"),  # Lean 3 and 4, named or anonymous
    "suffices": re.compile(r"\bsuffices\b"),
    "let": re.compile(r"\blet\s+[\w']+"),
    "induction": re.compile(r"\binduction\b"),
}
_DECOMPOSITION_COMMENT = re.compile(
    r"(?:--|/-)[^\n]*?\b(?:decompos\w*|breaking down|sub-?goals?|step\s+\d+|(?:base|inductive)\s+case)\b",
    re.IGNORECASE,
)


@reward_function
def deepseek_prover_v2_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: str | None,
    **kwargs: Any,
) -> EvaluateResult:
    """``lean_prover_reward`` (partial progress on), plus a bonus for subgoal decomposition when that score is
    at least 0.5: 0.03 per subgoal step (at most 0.3) and 0.2 × the indentation depth (deepest indentation / 40
    columns, at most 1); the total is capped at 1.0. ``kwargs``: ``statement`` (required), ``check_subgoals``
    (default ``True``; ``False`` gives ``lean_prover_reward``'s score).

    Subgoal steps: ``have`` (Lean 3 ``have h : t,`` and Lean 4 ``have h : t :=``), ``suffices``, ``let``,
    ``induction``, and Lean comments (``--``, ``/-``) announcing a decomposition ("step 2", "subgoal",
    "base case"...). Metrics: ``lean_prover_reward``'s, plus ``subgoal_decomposition`` (steps / 10, at most 1)
    and ``hierarchical_structure`` (the indentation depth).

    Differences from reward-kit (deliberate): decomposition comments are recognised in Lean's comment syntax
    (reward-kit looked for ``//`` and ``/*``, which Lean does not use, so that rule never fired) and Lean 3
    ``have h : t,`` steps count (reward-kit's pattern required ``:=``); ``induction`` is counted in code only,
    not in prose or comments; the two metrics are valid scores whatever their value.
    """
    base = lean_prover_reward(
        messages=messages, ground_truth=ground_truth, **{**kwargs, "check_partial_progress": True}
    )
    if not base.is_score_valid or not kwargs.get("check_subgoals", True):
        return base
    text, _ = assistant_text(messages)
    text = text or ""
    code = _COMMENT.sub(" ", text)
    steps = sum(len(p.findall(code)) for p in _SUBGOALS.values()) + len(_DECOMPOSITION_COMMENT.findall(text))
    indents = [len(line) - len(line.lstrip(" ")) for line in text.expandtabs(4).splitlines() if line.strip()]
    depth = min(1.0, max(indents, default=0) / 40)
    score, reason = base.score, base.reason or ""
    if base.score >= 0.5:
        score = min(1.0, base.score + 0.3 * min(steps, 10) / 10 + 0.2 * depth)
        reason = f"{reason}; subgoal decomposition: {steps} step(s), indentation depth {depth:.2f}"
    metrics = {
        **(base.metrics or {}),
        "subgoal_decomposition": metric(min(steps, 10) / 10, f"Found {steps} subgoal step(s)"),
        "hierarchical_structure": metric(depth, f"Hierarchical depth: {depth:.2f}"),
    }
    return EvaluateResult(score=score, reason=reason, metrics=metrics)
