"""The default probes on the built-in rewards: what docs/rewards.md ("Probes") reports, kept true.

Each built-in is wrapped in a project module (a module contributes the functions it defines) with
``probes="default"`` and its own samples: right and wrong answers as a policy would write them. The test pins every
probe that breaks its rule; each is either fixed (then pinned here as passing, with a unit test of the fix) or
documented as the reward's intended behaviour in docs/rewards.md. The code-execution rewards are left out here (they
run programs in the sandbox; docs/rewards.md gives their result and the command).
"""

from __future__ import annotations

import json

from pytest_reward.rewards import deepseek_prover_v2_reward, lean_prover_reward

from .conftest import msgs

WRAPPERS = {
    # name: (built-in, samples file, passes ground_truth)
    "accuracy": ("accuracy_reward", "accuracy", True),
    "cosine_scaled_accuracy_length": ("cosine_scaled_accuracy_length_reward", "accuracy", True),
    "math": ("math_reward", "math", True),
    "list_comparison_math": ("list_comparison_math_reward", "list", True),
    "multiple_choice_math": ("multiple_choice_math_reward", "mcq", True),
    "format": ("format_reward", "format", True),
    "tag_count": ("tag_count_reward", "tags", False),
    "length": ("length_reward", "length", False),
    "cosine_length": ("cosine_length_reward", "length", False),
    "repetition_penalty": ("repetition_penalty_reward", "repetition", False),
    "diversity": ("diversity_reward", "repetition", False),
    "reasoning_steps": ("reasoning_steps_reward", "reasoning", False),
    "sequence": ("sequence_reward", "sequence", False),
    "language_consistency": ("language_consistency_reward", "language", True),
    "json_schema": ("json_schema_reward", "json", False),
    "exact_tool_match": ("exact_tool_match_reward", "tools", True),
    "lean_prover": ("lean_prover_reward", "lean", True),
    "deepseek_prover_v2": ("deepseek_prover_v2_reward", "lean", True),
}

THINK = "<think>\nStep 1: multiply 6 by 7.\nStep 2: that gives 42.\n</think>\n<answer>\n42\n</answer>"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
LEAN = "theorem add_zero_right (n : Nat) : n + 0 = n"


def _call(city: str) -> dict:
    return {
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
        ]
    }


SAMPLES = {
    "accuracy": [
        {"messages": msgs("What is 6*7?", "6 times 7: the answer is 42."), "ground_truth": "42"},
        {"messages": msgs("What is 2+2?", "Two plus two, so the answer is 5."), "ground_truth": "4"},
        {"messages": msgs("Capital of France?", "The capital of France is Paris."), "ground_truth": "Paris"},
        {"messages": msgs("Capital of Germany?", "It is Munich."), "ground_truth": "Berlin"},
        {
            "messages": msgs("What is 10/4?", "10 divided by 4 gives 2.5, so the answer is 2.5"),
            "ground_truth": "2.5",
        },
    ],
    "math": [
        {"messages": msgs("What is 6*7?", "6*7 = 42.\n\nThe answer is \\boxed{42}."), "ground_truth": "42"},
        {"messages": msgs("What is 2+2?", "2+2 = 5, so \\boxed{5}."), "ground_truth": "4"},
        {"messages": msgs("Half of 1?", "Half of one is \\boxed{\\frac{1}{2}}."), "ground_truth": "0.5"},
        {"messages": msgs("48 + 1108?", "48 + 1108 = 1156\n#### 1156"), "ground_truth": "1156"},
        {"messages": msgs("7*8?", "7*8 = 54\n#### 54"), "ground_truth": "56"},
    ],
    "list": [
        {"messages": msgs("Divisors of 6 below 6?", "They are \\boxed{1, 2, 3}."), "ground_truth": "1, 2, 3"},
        {
            "messages": msgs("Primes below 10?", "The primes are \\boxed{2, 3, 5, 9}."),
            "ground_truth": "2, 3, 5, 7",
        },
        {"messages": msgs("Even numbers up to 6?", "\\boxed{2, 4, 6}"), "ground_truth": "2, 4, 6"},
    ],
    "mcq": [
        {
            "messages": msgs("Prime? (A) 4 (B) 7 (C) 8 (D) 9", "7 is prime, so the answer is (B)."),
            "ground_truth": "(B)",
        },
        {"messages": msgs("Even? (A) 3 (B) 5 (C) 6 (D) 9", "I pick (A)."), "ground_truth": "(C)"},
        {
            "messages": msgs("Largest? (A) 1 (B) 2 (C) 3 (D) 4 (E) 5", "The largest is (E)."),
            "ground_truth": "(E)",
        },
    ],
    "format": [
        {"messages": msgs("6*7?", THINK), "ground_truth": "42"},
        {"messages": msgs("6*7?", "42"), "ground_truth": "42"},
        {"messages": msgs("2+2?", "<think>\nadd\n</think>\n<answer>\n4\n</answer>"), "ground_truth": "4"},
    ],
    "tags": [
        {"messages": msgs("6*7?", THINK), "required_tags": ["think", "answer"]},
        {"messages": msgs("6*7?", "<think>42"), "required_tags": ["think", "answer"]},
        {"messages": msgs("2+2?", "4"), "required_tags": ["think", "answer"]},
    ],
    "length": [
        {
            "messages": msgs(
                "Explain photosynthesis briefly.", "Plants turn light, water and CO2 into sugar and oxygen."
            ),
            "target_length": 12,
        },
        {"messages": msgs("Explain gravity briefly.", "Mass attracts mass."), "target_length": 12},
        {
            "messages": msgs(
                "Explain rain briefly.",
                "Water evaporates, condenses into clouds and falls back down as rain when drops grow heavy enough.",
            ),
            "target_length": 12,
        },
    ],
    "repetition": [
        {
            "messages": msgs(
                "Describe a cat.", "A cat is a small furry animal that purrs, hunts mice and sleeps a lot."
            )
        },
        {"messages": msgs("Describe a dog.", "A dog is a dog is a dog is a dog is a dog is a dog.")},
        {"messages": msgs("Describe a bird.", "Birds have feathers, lay eggs and most of them can fly.")},
    ],
    "reasoning": [
        {
            "messages": msgs(
                "Tea?", "Step 1: boil water.\nStep 2: add the tea bag.\nStep 3: wait.\nStep 4: remove it."
            )
        },
        {"messages": msgs("Toast?", "Put bread in the toaster.")},
        {"messages": msgs("Knot?", "First, cross the ends. Next, loop one under. Finally, pull tight.")},
    ],
    "sequence": [
        {"messages": msgs("Tea?", "First boil water, then add the tea, next wait, finally remove the bag.")},
        {"messages": msgs("Toast?", "Toast the bread.")},
    ],
    "language": [
        {
            "messages": msgs(
                "Responde en español: ¿qué es el agua?",
                "El agua es una sustancia que es esencial para la vida.",
            ),
            "target_language": "es",
        },
        {
            "messages": msgs(
                "Responde en español: ¿qué es el sol?",
                "The sun is the star at the center of our solar system.",
            ),
            "target_language": "es",
        },
        {
            "messages": msgs(
                "Answer in English: what is ice?", "Ice is frozen water that forms when it gets cold."
            ),
            "target_language": "en",
        },
    ],
    "json": [
        {"messages": msgs("A person as JSON.", '{"name": "Ada", "age": 36}'), "expected_schema": PERSON},
        {
            "messages": msgs("A person as JSON.", '```json\n{"name": "Bob", "age": 41}\n```'),
            "expected_schema": PERSON,
        },
        {"messages": msgs("A person as JSON.", '{"title": "Dr"}'), "expected_schema": PERSON},
    ],
    "tools": [
        {
            "messages": msgs(
                "Weather in Paris?",
                '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
            ),
            "ground_truth": _call("Paris"),
        },
        {
            "messages": msgs(
                "Weather in Rome?",
                '<tool_call>{"name": "get_weather", "arguments": {"city": "Milan"}}</tool_call>',
            ),
            "ground_truth": _call("Rome"),
        },
    ],
    "lean": [
        {
            "messages": msgs("Prove n + 0 = n.", f"{LEAN} := by\n  simp"),
            "ground_truth": "simp",
            "statement": LEAN,
        },
        {
            "messages": msgs("Prove n + 0 = n.", f"{LEAN} := by\n  sorry"),
            "ground_truth": "simp",
            "statement": LEAN,
        },
        {
            "messages": msgs(
                "Prove 0 + n = n.",
                "theorem zero_add' (n : Nat) : 0 + n = n := by\n  induction n with\n  | zero => rfl\n"
                "  | succ k ih => rw [Nat.add_succ, ih]",
            ),
            "ground_truth": "induction",
            "statement": "theorem zero_add' (n : Nat) : 0 + n = n",
        },
    ],
}

#: Every default probe that breaks its rule on the built-ins, and why it stays (docs/rewards.md, "Probes").
DOCUMENTED = {
    # the answer is compared by value: a question whose own expression is the answer ("What is 10/4?") is
    # answered by echoing it
    ("accuracy", "echo"),
    ("cosine_scaled_accuracy_length", "echo"),
    # a textual ground truth is compared by containment (whole words)
    ("accuracy", "stuffing"),
    # length schedules pay longer wrong answers a little more, by design (cosine scaling)
    ("cosine_scaled_accuracy_length", "repeat"),
    ("cosine_length", "repeat"),
    ("length", "repeat"),
    # measures of one property, meant to be combined with a content reward
    ("repetition_penalty", "empty"),
    ("repetition_penalty", "echo"),
    ("diversity", "echo"),
    ("language_consistency", "echo"),
    ("format", "format_only"),
    ("tag_count", "format_only"),
    ("json_schema", "format_only"),
    # a relative tolerance of 0.001 by default: "1155 and 1156" is right for 1156 (1155 is within 0.1%; pass
    # tolerance=0 for integer answers)
    ("math", "stuffing_pair"),
}


def _project(project) -> None:
    lines = [
        "import pytest",
        "from pytest_reward import reward_function",
        "from pytest_reward import rewards as R",
        "",
    ]
    for name, (builtin, samples, with_truth) in WRAPPERS.items():
        truth = "ground_truth=None, " if with_truth else ""
        passed = "ground_truth=ground_truth, " if with_truth else ""
        lines += [
            f'@pytest.mark.reward(probes="default", samples="{samples}.jsonl")',
            "@reward_function",
            f"def {name}(messages, {truth}**kw):",
            f"    return R.{builtin}(messages=messages, {passed}**kw)",
            "",
        ]
    project.file("rewards.py", "\n".join(lines))
    for name, rows in SAMPLES.items():
        project.jsonl(f"{name}.jsonl", [{"id": f"{name}{i}", **row} for i, row in enumerate(rows, 1)])


def test_the_default_probes_on_the_builtins_find_what_the_docs_say(project):
    _project(project)
    result = project.result("-k", "probe")
    verdicts = {(p.function, p.probe): p.verdict for p in result.probes}
    assert {fn for fn, _ in verdicts} == set(WRAPPERS)
    failed = {key for key, verdict in verdicts.items() if verdict == "FAIL"}
    assert failed == DOCUMENTED
    assert not {key for key, verdict in verdicts.items() if verdict == "ERROR"}
    # fixed: the Lean rewards paid 1.0 for any text naming the expected proof (a list of candidate tactics)
    assert verdicts["lean_prover", "stuffing"] == verdicts["deepseek_prover_v2", "stuffing"] == "PASS"


def test_lean_rewards_credit_the_expected_proof_only_inside_a_stated_proof():
    stuffed = "The answer could be none of the above, or simpp, or sim, or simp, or pmis."
    in_a_comment = "-- the proof is simp\nI could not do it."
    proof = f"{LEAN} := by\n  simp"
    for reward in (lean_prover_reward, deepseek_prover_v2_reward):
        for text in (stuffed, in_a_comment):
            result = reward(messages=msgs("Prove it.", text), ground_truth="simp", statement=LEAN)
            assert result.score == 0.0, (reward.__name__, text)
            assert result.metrics["expected_match"].score == 0.0
        right = reward(messages=msgs("Prove it.", proof), ground_truth="simp", statement=LEAN)
        assert right.score == 1.0
    # the expected proof is matched as code: comments aside, whitespace normalised
    spaced = lean_prover_reward(
        messages=msgs("Prove it.", f"{LEAN} := by\n  -- easy\n  rw [Nat.add_zero]"),
        ground_truth="rw  [Nat.add_zero]   -- done",
        statement=LEAN,
    )
    assert spaced.score == 1.0
