"""A preference file's pairs scored whole in the in-process loop (``scoring.pairs.pair_scorer``, a right pair folded
by its margin without its outcome) give what every other executor gives, which scores each response as a sample of
its own and folds the outcomes back into pairs; and each response's call still gets its own input, so a reward
that changes it in place fails the pair, naming it."""

from __future__ import annotations

import pytest

# score = the number in the response; "boom" raises; "nan" is not a finite score; "unsure" is marked invalid.
NUMBER = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward({marker})
    @reward_function
    def number(messages, ground_truth=None, **kwargs):
        text = messages[-1]["content"]
        if text == "boom":
            raise ZeroDivisionError("the reward cannot read boom")
        if text == "unsure":
            return EvaluateResult(score=0.5, is_score_valid=False, reason="not sure")
        return EvaluateResult(score=float(text), reason="x" * 400 if text == "0.31" else f"read {{text}}")
"""


def pair(i: int, chosen: str, rejected: object, **more: object) -> dict[str, object]:
    return {"prompt": f"Which is better, {i}?", "chosen": chosen, "rejected": rejected, **more}


def rows() -> list[dict[str, object]]:
    """Right pairs with margins that tie, a late lowest margin, wrong pairs, ties, best-of-n pairs (right, tied at
    the top, wrong), responses that raise or give no valid score, pairs with ids, subsets, ground truths, fields."""
    out = []
    for i in range(240):
        subset = ("chat", "math", None)[i % 3]
        more: dict[str, object] = {"subset": subset} if subset else {}
        if i % 40 == 7:
            out.append(pair(i, "0.2", "0.6", **more))  # wrong
        elif i % 40 == 11:
            out.append(pair(i, "0.5", "0.50", **more))  # tie: wrong
        elif i % 40 == 17:
            out.append(pair(i, "0.9", ["0.1", "0.90", "0.3"], **more))  # best-of-n tie at the top: 1/2
        elif i % 40 == 19:
            out.append(pair(i, "0.9", ["0.1", "0.2", "0.3"], id=f"bon-{i}", **more))  # best-of-n right
        elif i % 40 == 23:
            out.append(pair(i, "0.9", ["0.1", "boom", "nan"], **more))  # fails on two rejected responses
        elif i % 40 == 29:
            out.append(pair(i, "unsure", "0.1", ground_truth="x", **more))  # the chosen response has no score
        elif i % 40 == 31:
            out.append(pair(i, "0.9", "0.6", id=f"p{i}", extra=[1, 2], **more))  # a field, an id
        elif i == 230:
            out.append(
                pair(i, "0.31", "0.3", **more)
            )  # the lowest margin of a right pair, late, a long reason
        else:
            out.append(
                pair(i, f"0.{5 + i % 4}", "0.4", ground_truth=str(i), **more)
            )  # margins 0.1 .. 0.4, tied
    return out


@pytest.mark.parametrize("marker", ["pair_accuracy=0.5", "threshold=0.55", ""])
def test_pairs_scored_whole_give_every_executors_summary_lowest_and_preview(project, marker):
    project.file("rewards.py", NUMBER.format(marker=marker))
    project.jsonl("pairs.jsonl", rows())
    args = ["--reward-samples", "pairs.jsonl", "--reward-granularity", "file", "--reward-preview", "7"]

    def kept(outcomes: tuple) -> list[tuple]:
        return [
            (o.line, o.sample_id, o.key, o.verdict, o.score, o.reason, o.error, o.failures, o.below, o.user,
             o.response, o.ground_truth, o.extra)
            for o in outcomes
        ]  # fmt: skip

    def seen(*extra: str) -> tuple:
        (group,) = project.result(*args, *extra).groups
        return group.verdict, group.summary.to_dict(), kept(group.outcomes), kept(group.preview_pool)

    whole = seen()
    verdict, summary, lowest, preview = whole
    assert len(preview) == 7 and len(lowest) == 20
    for extra in (["--reward-workers", "2"], ["--reward-executor", "process", "--reward-workers", "2"]):
        assert seen(*extra) == whole, extra
    p = summary["preference"]
    # 240 pairs: per 40, 1 wrong, 1 tie, 1 best-of-n tie (1/2), 1 failing, 1 without a chosen score; 35 right
    assert (p["n"], p["n_errors"], p["n_tied"], p["n_best_of_n"]) == (240, 12, 12, 18)
    assert p["credit"] == pytest.approx(6 * 35 + 6 * 0.5)
    assert {name: c["n"] for name, c in p["subsets"].items()} == {"chat": 80, "math": 80}
    wrong = [o for o in lowest if o[4] is None or o[4] <= 0]
    assert (
        len(wrong) == 20
    )  # the 12 failing pairs and 18 wrong or tied ones come first: the lowest 20 are these
    if marker == "":
        assert verdict == "FAIL"


def test_the_lowest_right_pairs_are_kept_by_margin_in_file_order(project):
    project.file("rewards.py", NUMBER.format(marker="pair_accuracy=0.5"))
    right = [pair(i, f"0.{5 + i % 4}", "0.4") for i in range(200)]
    right[150] = pair(150, "0.31", "0.3")
    project.jsonl("pairs.jsonl", right)
    (group,) = project.result("--reward-samples", "pairs.jsonl", "--reward-granularity", "file").groups
    assert group.verdict == "PASS"
    lowest = [(o.line, o.score) for o in group.outcomes]
    # the late 0.01 margin first, then the 0.1 margins (every fourth pair) in file order
    assert lowest[0] == (151, pytest.approx(0.01))
    assert [line for line, _ in lowest[1:]] == [1 + 4 * k for k in range(19)]
    assert all(score == pytest.approx(0.1) for _, score in lowest[1:])
    assert group.outcomes[0].reason is None and group.outcomes[0].extra["pair"]["reasons"][0].startswith(
        "x" * 300
    )


MUTATES = """
    import pytest
    from pytest_reward import reward_function, EvaluateResult

    @pytest.mark.reward(pair_accuracy=0.5)
    @reward_function
    def {name}(messages, ground_truth=None, **kwargs):
        {change}
        return EvaluateResult(score=float(messages[-1]["content"]) if messages[-1]["content"][0] == "0" else 0.0)
"""


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("appends", 'messages.append({"role": "user", "content": "more"}); messages.pop(); messages.append({"role": "assistant", "content": "0"})'),
        ("rewrites_the_context", 'messages[0]["content"] = "changed"'),
        ("rewrites_the_response", 'messages[-1]["content"] = "0.0"'),
    ],
)  # fmt: skip
@pytest.mark.parametrize("args", [(), ("--reward-workers", "2")], ids=["whole", "responses"])
def test_a_reward_that_changes_its_input_fails_every_pair_naming_it(project, name, change, args):
    project.file("rewards.py", MUTATES.format(name=name, change=change))
    project.jsonl("pairs.jsonl", [pair(i, "0.9", "0.1") for i in range(3)])
    result = project.run("--reward-samples", "pairs.jsonl", "--reward-granularity", "file", *args)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            f"*pairs.jsonl:1 ?line-1?  the reward failed on the chosen response (and on rejected): InvalidResult: "
            f"{name} changed its input 'messages' in place*"
        ]
    )
    assert "3 of 3 pairs failed" in result.stdout.str()
