"""examples/advanced: the seed guide "Advanced Reward Functions" as a pytest-reward project.

The expected scores are derived by hand from the seed's rules (the arithmetic is in the comments); nothing here
imports the example's functions.
"""

from __future__ import annotations

import shutil

import pytest

from .conftest import EXAMPLES

FUNCTIONS = ("combined_reward", "comprehensive_evaluator", "contextual_reward")
SAMPLES = (
    "photosynthesis-good",
    "photosynthesis-poor",
    "photosynthesis-custom-weights",
    "garden-follow-up",
    "garden-off-topic",
    "csv-follow-up",
)


@pytest.fixture
def advanced(pytester, project):
    shutil.copytree(
        EXAMPLES / "advanced", pytester.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    # Run under the example's own pyproject.toml (pythonpath = ["."]), not the fixture's blank tox.ini.
    (pytester.path / "tox.ini").unlink()
    return project


# --- comprehensive_evaluator: weights 0.3 helpfulness, 0.3 accuracy, 0.3 safety, 0.1 conciseness -------------
# helpfulness = 0.4 × (share of the FIRST user message's \w{4,} words found among the answer's \w{4,} words)
#             + 0.3 if "answer is"/"solution is"/"you can"/"you should"/"here's how" + 0.3 if "because"/... .
# accuracy = 0.6 × max(0, 1 − 0.2 × hedges) + 0.4 × min(0.25 × factual phrases, 1); no answer has a factual
#            phrase ("research shows", ..., "fact"), so accuracy = 0.6 × confidence.
# safety = 1 − 0.3 × categories − min(0.1 × terms, 0.7) (substring matches); conciseness = 1.0 for 20–150
#          words, 0.5 under 20.
#
# photosynthesis-good: query {does, photosynthesis, work}; the answer has "photosynthesis" only -> 1/3; no
#   direct-answer phrase; "because" -> helpfulness 0.4/3 + 0.3 = 0.4333. No hedge -> accuracy 0.6. No unsafe
#   term -> safety 1. 88 words -> conciseness 1.
#   score 0.3 × 0.4333 + 0.3 × 0.6 + 0.3 × 1 + 0.1 × 1 = 0.13 + 0.18 + 0.3 + 0.1 = 0.71
# photosynthesis-poor: overlap 1/3, no answer phrase ("You could" is not "you can"), no explanation ->
#   helpfulness 0.1333. Hedges "might be", "probably", "not sure", "possibly", "I think" = 5 ("could involve" is not
#   "could be") -> confidence 0 -> accuracy 0. Unsafe: illegal_activity {illegal, drug} + harmful_instructions
#   {how to make}: 1 − 0.3 × 2 − 0.1 × 3 = 0.1. 79 words -> 1.
#   score 0.3 × 0.1333 + 0 + 0.3 × 0.1 + 0.1 = 0.04 + 0.03 + 0.1 = 0.17
# photosynthesis-custom-weights: the good answer, weights 0.2/0.5/0.2/0.1, boost 1.2:
#   (0.2 × 0.4333 + 0.5 × 0.6 + 0.2 × 1 + 0.1 × 1) × 1.2 = 0.68667 × 1.2 = 0.824; metric boost_applied = 0
# garden-follow-up: first user message {planning, vegetable, garden, balcony, which, vegetables, grow, well,
#   containers} (9); the answer has containers, balcony, garden -> 3/9; no phrase -> helpfulness 0.4/3 = 0.1333.
#   accuracy 0.6, safety 1, 44 words -> 1. score 0.04 + 0.18 + 0.3 + 0.1 = 0.62
# garden-off-topic: "Water is a molecule ..." shares none of the 9 -> helpfulness 0; 13 words -> conciseness 0.5.
#   score 0 + 0.18 + 0.3 + 0.05 = 0.53
# csv-follow-up: first user message {python, script, reads, large, file, runs, memory, what} (8); the answer has
#   python, memory, large, file -> 4/8 ("read_csv" is one \w token); "because" -> helpfulness 0.2 + 0.3 = 0.5.
#   40 words. score 0.15 + 0.18 + 0.3 + 0.1 = 0.73
COMPREHENSIVE = {
    "photosynthesis-good": (0.71, 0.4 / 3 + 0.3, 0.6, 1.0, 1.0),
    "photosynthesis-poor": (0.17, 0.4 / 3, 0.0, 0.1, 1.0),
    "photosynthesis-custom-weights": (0.824, 0.4 / 3 + 0.3, 0.6, 1.0, 1.0),
    "garden-follow-up": (0.62, 0.4 / 3, 0.6, 1.0, 1.0),
    "garden-off-topic": (0.53, 0.0, 0.6, 1.0, 0.5),
    "csv-follow-up": (0.73, 0.5, 0.6, 1.0, 1.0),
}

# --- combined_reward: 0.4 helpfulness + 0.4 factuality + 0.2 safety (reward_components/) ----------------------
# helpfulness_reward = 0.75 × evaluate_helpfulness(LAST user message, answer) + 0.25 × conciseness;
# factuality_reward = evaluate_accuracy; safety_reward = evaluate_safety (values as above).
# photosynthesis-good: 0.75 × 0.4333 + 0.25 = 0.575; 0.4 × 0.575 + 0.4 × 0.6 + 0.2 × 1 = 0.23 + 0.24 + 0.2 = 0.67
# photosynthesis-poor: 0.75 × 0.1333 + 0.25 = 0.35; 0.4 × 0.35 + 0 + 0.2 × 0.1 = 0.14 + 0.02 = 0.16
# photosynthesis-custom-weights: the metadata's weights have no "factuality" key -> weight 0:
#   0.2 × 0.575 + 0 × 0.6 + 0.2 × 1 = 0.115 + 0.2 = 0.315
# garden-follow-up: last user message {often, should, water, them}; the answer has "water" -> 1/4 -> 0.1;
#   helpfulness 0.75 × 0.1 + 0.25 = 0.325; 0.13 + 0.24 + 0.2 = 0.57
# garden-off-topic: "water" -> 0.1; conciseness 0.5; helpfulness 0.075 + 0.125 = 0.2; 0.08 + 0.24 + 0.2 = 0.52
# csv-follow-up: last user message {which, those, faster}: none in the answer; "because" -> 0.3;
#   helpfulness 0.225 + 0.25 = 0.475; 0.19 + 0.24 + 0.2 = 0.63
COMBINED = {
    "photosynthesis-good": (0.67, 0.575, 0.6, 1.0),
    "photosynthesis-poor": (0.16, 0.35, 0.0, 0.1),
    "photosynthesis-custom-weights": (0.315, 0.575, 0.6, 1.0),
    "garden-follow-up": (0.57, 0.325, 0.6, 1.0),
    "garden-off-topic": (0.52, 0.2, 0.6, 1.0),
    "csv-follow-up": (0.63, 0.475, 0.6, 1.0),
}

# --- contextual_reward: (continuity + query_addressing + context_utilization) / 3 -----------------------------
# topics = [a-zA-Z]{5,} words minus the stop words. continuity = min(2 × |answer topics ∩ topics so far| /
# |topics so far|, 1). addressing (the query has a question word): 0.5 + 0.25 if a pattern ("it is", "there
# are", ...) + 0.25 × share of the query's [a-zA-Z]{4,} non-stop words found (substrings) in the answer.
# context_utilization: keywords of the history before the last user turn; none -> 0.5; else
# min(matches / max(0.3 × n, 1), 0.7) + 0.3 for an explicit reference ("as we discussed", ...).
#
# photosynthesis (all three samples; metadata is ignored): topics {photosynthesis}, in both answers -> 1.0;
#   query keywords {does, photosynthesis, work}: 1/3 found, no pattern -> 0.5 + 0.25/3 = 0.5833; no history
#   before the question -> 0.5. score (1 + 0.5833 + 0.5) / 3 = 0.6944
# garden-follow-up: topics so far (19): planning, vegetable, garden, balcony, vegetables, containers, tomatoes,
#   peppers, lettuce, herbs, choose, drainage, holes, place, least, hours, sunlight, often, water; the answer
#   has 9 of them (containers, balcony, garden, water, tomatoes, peppers, lettuce, drainage, holes) -> 18/19.
#   "How often should I water them?": "it is" found; keywords {often, water, them}: water -> 0.5 + 0.25 + 0.25/3
#   = 0.8333. History keywords (the 17 topics before "often", "water"): 7 found -> min(7 / 5.1, 0.7) = 0.7,
#   + 0.3 for "as we discussed" -> 1.0. score (18/19 + 5/6 + 1) / 3 = 0.9269
# garden-off-topic: answer topics {water, molecule, hydrogen, atoms, oxygen}: water -> 2/19; no pattern ("water
#   is" is not "it is"), water -> 0.5 + 0.25/3; none of the 17 history keywords, no reference -> 0.
#   score (2/19 + 7/12 + 0) / 3 = 0.2295
# csv-follow-up: topics so far (14): python, script, reads, large, memory, chunks, pandas, chunksize, iterate,
#   module, whole, never, loaded, faster ("read_csv" has no word boundary inside); the answer has 9 -> 1.0.
#   "Which of those is faster?": "it is" found; keywords {those, faster}: none -> 0.75. History keywords (13):
#   9 found -> 0.7, + 0.3 for "as mentioned earlier" -> 1.0. score (1 + 0.75 + 1) / 3 = 0.9167
PHOTO_CONTEXT = (1.0, 0.5 + 0.25 / 3, 0.5)
CONTEXTUAL = {
    "photosynthesis-good": PHOTO_CONTEXT,
    "photosynthesis-poor": PHOTO_CONTEXT,
    "photosynthesis-custom-weights": PHOTO_CONTEXT,
    "garden-follow-up": (18 / 19, 0.5 + 0.25 + 0.25 / 3, 1.0),
    "garden-off-topic": (2 / 19, 0.5 + 0.25 / 3, 0.0),
    "csv-follow-up": (1.0, 0.75, 1.0),
}


def _by_function(outcomes):
    out: dict[str, dict[str, dict]] = {}
    for o in outcomes:
        out.setdefault(o["function"], {})[o["sample_id"]] = o
    return out


def test_advanced_example_scores_what_its_code_computes(advanced):
    got = _by_function(advanced.outcomes("--reward-samples", "samples.jsonl"))
    # The components are imported by combined_reward.py, not defined there: they are not collected on their own.
    assert sorted(got) == list(FUNCTIONS)
    for name in FUNCTIONS:
        assert list(got[name]) == list(SAMPLES)

    comprehensive = got["comprehensive_evaluator"]
    for sample, (score, helpfulness, accuracy, safety, conciseness) in COMPREHENSIVE.items():
        o = comprehensive[sample]
        assert o["score"] == pytest.approx(score), sample
        metrics = {k: v["score"] for k, v in o["metrics"].items()}
        expected = {
            "helpfulness": helpfulness,
            "accuracy": accuracy,
            "safety": safety,
            "conciseness": conciseness,
        }
        if sample == "photosynthesis-custom-weights":
            expected["boost_applied"] = 0.0
        assert metrics == pytest.approx(expected), sample
    assert comprehensive["photosynthesis-custom-weights"]["metrics"]["boost_applied"]["reason"] == (
        "Applied boost factor of 1.2"
    )
    assert comprehensive["photosynthesis-poor"]["metrics"]["safety"]["reason"] == (
        "Safety issues detected: illegal_activity, harmful_instructions"
    )

    combined = got["combined_reward"]
    for sample, (score, helpfulness, factuality, safety) in COMBINED.items():
        o = combined[sample]
        assert o["score"] == pytest.approx(score), sample
        metrics = {k: v["score"] for k, v in o["metrics"].items()}
        # The component scores, and each component's own metrics under its prefix.
        assert metrics["helpfulness"] == pytest.approx(helpfulness), sample
        assert metrics["factuality"] == pytest.approx(factuality), sample
        assert metrics["safety"] == pytest.approx(safety), sample
        assert metrics["factuality_language"] == pytest.approx(factuality), sample
        assert metrics["safety_keywords"] == pytest.approx(safety), sample
        assert 0.75 * metrics["helpfulness_answer"] + 0.25 * metrics[
            "helpfulness_conciseness"
        ] == pytest.approx(helpfulness)
        assert sorted(metrics) == [
            "factuality",
            "factuality_language",
            "helpfulness",
            "helpfulness_answer",
            "helpfulness_conciseness",
            "safety",
            "safety_keywords",
        ]

    contextual = got["contextual_reward"]
    for sample, (continuity, addressing, context) in CONTEXTUAL.items():
        o = contextual[sample]
        assert o["score"] == pytest.approx((continuity + addressing + context) / 3), sample
        metrics = {k: v["score"] for k, v in o["metrics"].items()}
        assert metrics == pytest.approx(
            {"continuity": continuity, "query_addressing": addressing, "context_utilization": context}
        ), sample

    # Misses tolerated by the pass_rate gates: the seed's poor answer (comprehensive 0.17 < 0.5, combined
    # 0.16 < 0.3, safety 0.1 < 0.5 in both) and the off-topic follow-up (contextual 0.2295 < 0.4).
    below = sorted((o["function"], o["sample_id"]) for f in got.values() for o in f.values() if o["below"])
    assert below == [
        ("combined_reward", "photosynthesis-poor"),
        ("comprehensive_evaluator", "photosynthesis-poor"),
        ("contextual_reward", "garden-off-topic"),
    ]
    assert all(not o["failures"] for f in got.values() for o in f.values())


def test_advanced_example_run_is_green_with_one_deprecation_warning_per_function(advanced):
    result = advanced.run("--reward-samples", "samples.jsonl")
    assert result.ret == 0
    result.assert_outcomes(passed=15, warnings=3)
    result.stdout.fnmatch_lines(["*15 passed, 3 warnings, 3 below threshold*"])
    out = result.stdout.str()
    for name in FUNCTIONS:
        # All three return the legacy RewardOutput: converted, and warned about once per function.
        warning = f"DeprecationWarning: reward function '{name}' returned the legacy RewardOutput"
        assert out.count(warning) == 1, name
    # Means: comprehensive 3.584 / 6 = 0.597; combined 2.865 / 6 = 0.4775; contextual
    # (3 × 0.6944 + 0.9269 + 0.2295 + 0.9167) / 6 = 0.693. Pass rates 5/6 each.
    result.stdout.fnmatch_lines(
        [
            "*reward summary*",
            "*combined_reward*samples.jsonl*6*0.47?*0.160*83.3%*PASS*",
            "*comprehensive_evaluator*samples.jsonl*6*0.597*0.170*83.3%*PASS*",
            "*contextual_reward*samples.jsonl*6*0.693*0.230*83.3%*PASS*",
        ]
    )


def test_advanced_example_components_are_reachable_with_reward_fn(advanced):
    # pythonpath = ["."] in the example's pyproject.toml makes reward_components importable by module name.
    result = advanced.run(
        "--reward-samples", "samples.jsonl", "--reward-fn", "reward_components.safety:safety_reward"
    )
    # safety: 1.0 on every answer but the poor one (0.1): mean (5 + 0.1) / 6 = 0.85.
    result.stdout.fnmatch_lines(["*safety_reward*samples.jsonl*6*0.850*0.100*FAIL*"])
    # A sample's `expect` applies to every function that scores it: garden-off-topic's {"max": 0.55}, written for
    # the three collected rewards, does not hold for a safety screen (the off-topic answer is safe: 1.0).
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        ["FAILED samples.jsonl::safety_reward?garden-off-topic? - expect score: expected ≤ 0.55, got 1"]
    )
