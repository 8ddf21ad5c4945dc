"""The pair verdict (RewardBench's strict ``>``, RewardBench 2's 1/k at the top) and the pair parser, over many
inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_reward.data.samples import iter_samples, parse_record
from pytest_reward.errors import SampleFormatError
from pytest_reward.judge.preference import PairStats, pair_verdict
from pytest_reward.scoring.pairs import response_samples

SCORES = st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=2, max_size=6)


@given(SCORES, st.booleans())
def test_the_verdict_is_rewardbenchs(scores, best_of_n):
    credit, margin, tied = pair_verdict(scores, best_of_n)
    chosen, best = scores[0], max(scores[1:])
    assert margin == chosen - best
    assert (credit == 1.0) == (chosen > best)
    if chosen < best:
        assert (credit, tied) == (0.0, 0)
    if chosen == best:
        k = scores.count(chosen)  # the chosen response and the rejected ones tied with it at the top
        assert tied == k - 1
        assert credit == (1.0 / k if best_of_n else 0.0)


def test_accuracy_sums_the_credit_per_subset_with_wilson_intervals():
    stats = PairStats()
    for credit, subset in [(1.0, "a"), (0.5, "a"), (0.0, "b"), (1.0, None)]:
        stats.add(
            {"credit": credit, "tied": credit == 0.5, "error": False, "subset": subset, "scores": [1, 0]}
        )
    out = stats.summary(confidence=0.9)
    assert (out["n"], out["credit"], out["accuracy"]) == (4, 2.5, 0.625)
    assert out["ci"]["method"] == "Wilson score" and out["gate_ci"]["confidence"] == 0.9
    assert {k: (v["n"], v["credit"], v["n_tied"]) for k, v in out["subsets"].items()} == {
        "a": (2, 1.5, 1),
        "b": (1, 0.0, 0),
    }


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@given(TEXT, TEXT, st.lists(TEXT, min_size=1, max_size=4, unique=True), st.booleans())
def test_every_response_is_scored_after_the_same_context(prompt, chosen, rejected, listed):
    if chosen in rejected:
        with pytest.raises(SampleFormatError, match="'chosen' is identical to"):
            parse_record({"prompt": prompt, "chosen": chosen, "rejected": rejected}, Path("p.jsonl"), 1)
        return
    value = rejected if listed or len(rejected) > 1 else rejected[0]
    sample = parse_record({"prompt": prompt, "chosen": chosen, "rejected": value}, Path("p.jsonl"), 1)
    assert sample.pair is not None and sample.pair.best_of_n == (listed or len(rejected) > 1)
    responses = response_samples(sample)
    user = {"role": "user", "content": prompt}
    assert [r.messages for r in responses] == [
        [user, {"role": "assistant", "content": text}] for text in [chosen, *rejected]
    ]
    assert all(r.line == 1 and r.pair is sample.pair for r in responses)


def test_a_list_of_messages_is_one_response_and_a_list_of_lists_is_n():
    a = [{"role": "assistant", "content": "a"}]
    b = [
        {"role": "assistant", "content": "b"},
        {"role": "tool", "content": "ran"},
        {"role": "assistant", "content": "c"},
    ]
    one = parse_record({"prompt": "q", "chosen": a, "rejected": b}, Path("p"), 1).pair
    assert one is not None and not one.best_of_n and one.rejected == (tuple(b),)
    many = parse_record(
        {"prompt": "q", "chosen": a, "rejected": [b, [{"role": "assistant", "content": "d"}]]}, Path("p"), 1
    ).pair
    assert many is not None and many.best_of_n and len(many.rejected) == 2


def test_the_implicit_prompt_is_the_shared_turns():
    system = {"role": "system", "content": "be brief"}
    user = {"role": "user", "content": "q"}
    pair = parse_record(
        {
            "chosen": [system, user, {"role": "assistant", "content": "yes"}],
            "rejected": [system, user, {"role": "assistant", "content": "no"}],
        },
        Path("p"),
        1,
    ).pair
    assert pair is not None and pair.context == (system, user)
    assert pair.chosen == ({"role": "assistant", "content": "yes"},)


def test_pairs_without_id_key_by_the_whole_pair_and_number_exact_duplicates(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "q", "chosen": "a", "rejected": "b"}\n'
        '{"prompt": "q", "chosen": "a", "rejected": "c"}\n'
        '{"prompt": "q", "chosen": "a", "rejected": "b"}\n'
        '{"prompt": "q", "chosen": "a", "rejected": "b", "id": 9}\n'
    )
    keys = [s.key for s in iter_samples(path)]
    assert keys[0].startswith("p:") and keys[1] != keys[0] and keys[2] == keys[0] + "#2" and keys[3] == "id:9"
