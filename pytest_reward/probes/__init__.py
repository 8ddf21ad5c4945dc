"""Reward-hacking probes: mutations of a sample's response, the rules their scores must keep, and the registry.

A reward function that scores the samples well can still be gamed: a policy under RL finds the empty answer that
scores like a wrong one, the answer that lists every candidate, the well-formed tags around nothing. A probe
builds a mutated response from each sample's response (deterministically: the randomness a mutation uses is
seeded by ``--reward-seed``, the probe and the sample), the reward function scores it exactly as it scores the
samples (:mod:`pytest_reward.plugin.probe_items`), and the probe's **rule** says what that score may be:

=================  ==========================================================================================
rule               holds when the mutated response's score ...
=================  ==========================================================================================
``<= floor``       is at most the function's *floor*: the lowest score of the samples' own responses (0 when
                   none has one): a response that earns nothing must not beat the worst real answer
``<= original``    is at most the score of the sample's own response (the mutation must not help)
``== original``    equals the score of the sample's own response (the reward is invariant to the mutation)
``>= original``    is at least the score of the sample's own response (the mutation keeps a correct answer
                   correct: it must not cost the response its score)
``not pass``       does not pass: below the marker's ``threshold`` when one is declared; without one, a pass
                   is a score above the floor that is as high as the best sample's (full credit)
``info``           anything: the scores are reported, the probe never fails
=================  ==========================================================================================

The floor is only as low as the samples make it: when every sample passes, ``<= floor`` rules compare with a
passing score, and the probe's result says so (add wrong answers to the samples to give them teeth).
``<=``, ``==`` and ``>=`` rules take a tolerance for noisy rewards: ``"<= original + 0.05"``,
``"== original ± 0.02"`` (``+-`` and ``+/-`` work too), ``">= original - 0.05"``. A response with no valid score
(``is_score_valid=False``, a non-finite score) earns nothing: it keeps every ``<=`` and ``not pass`` rule, and
breaks ``== original`` and ``>= original`` unless the original had no valid score either. A reward that *raises* on a mutated response breaks every rule but ``info``: a policy can
produce that response, and the trainer would get no score for it.

The built-in probes (``probes="default"`` runs the first six and ``stuffing_pair``):

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

The probes for the reward bugs RL teams shipped (``docs/reward-bugs.md`` has each bug, its source, and a buggy
reward with its fix): ``stuffing_pair`` (``not pass``: "41 or 42", the truth second, in the response's answer
format; in the default set), ``neutral_tail`` and ``neutral_prefix`` (``>= original``: a neutral paragraph after or
before a response), ``format.hash``, ``format.boxed``, ``format.answer_is``, ``format.answer_colon``,
``format.answer_tag`` (``info``: a passing answer restated in each other format), ``think_removed`` and
``think_wrapped`` (``== original``), ``multiline`` (``== original``: tagged content over several lines),
``duplicate_block`` and ``extra_close_tag`` (``not pass``), ``code.exit0`` and ``code.hardcoded`` (``not pass``: a
program that exits 0 silently, or prints the expected output), ``length.longer`` and ``length.shorter`` (their rules
set by the marker's ``direction=``). Three are checks whose mutation is the identity: ``batch_order`` and
``batch_alone`` (``== original``: a batch function's samples scored again in the reverse order, or each alone),
``abstaining_groups`` (``info``, a warning: the prompts none of whose responses has a valid score) and
``reference`` (the marker's ``reference=`` function scores every sample too; ``agreement=`` gates it). A marker's
``probes=`` list expands the groups of :data:`PROBE_GROUPS` (``default``, ``neutral``, ``formats``, ``think``,
``tags``, ``code``, ``batch``).

A probe applies to a sample when its mutation returns a string (``None``: nothing to mutate, e.g. ``stuffing``
without a ground truth, ``format_only`` on a response without structure); only samples whose conversation ends
with an assistant turn of text are probed.

Custom probes: ``@pytest_reward.probe("name", rule="<= original")`` on a function ``(response, sample) -> str |
None`` (``sample`` is a :class:`ProbeSample`), or ``probes.register(...)`` in the ``pytest_reward_probes`` hook.
"""

from __future__ import annotations

from .answers import DIRECTION_FEATURES, direction_probes
from .mutations import (
    ProbeSample,
    SeededRandom,
    answer_start,
    response_text,
    truth_texts,
    with_response_text,
)
from .registry import (
    BUILTIN_PROBES,
    DEFAULT_PROBES,
    PROBE_GROUPS,
    Probe,
    ProbeRegistry,
    RewardAbstainWarning,
    decorated_probes,
    probe,
)
from .rules import Rule, floor_of, parse_rule, passes

__all__ = [
    "BUILTIN_PROBES",
    "DEFAULT_PROBES",
    "DIRECTION_FEATURES",
    "PROBE_GROUPS",
    "Probe",
    "ProbeRegistry",
    "ProbeSample",
    "RewardAbstainWarning",
    "Rule",
    "SeededRandom",
    "answer_start",
    "decorated_probes",
    "direction_probes",
    "floor_of",
    "parse_rule",
    "passes",
    "probe",
    "response_text",
    "truth_texts",
    "with_response_text",
]

