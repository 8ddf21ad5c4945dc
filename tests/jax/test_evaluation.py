"""The evaluation classes against hand-computed values (including the cases an evaluation easily gets wrong: the
direction and the aggregate of a perplexity, the first continuation token of a comparison, the end markers of a
generated answer), reward-function scorers, and bad input.

Most tests run on a *bigram* model whose logits are a hand-written table (``conftest.bigram_job``), so every
log-probability is ``log_softmax(TABLE[previous token])[token]`` and can be computed here with numpy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pytest_reward.evaluation import (
    EncodingEvaluation,
    Evaluation,
    EvaluationError,
    EvaluationSample,
    ModelJob,
    PerplexityComparisonEvaluation,
    PerplexityEvaluation,
    RolloutEvaluation,
    reduce_scores,
)
from pytest_reward.jax import ByteTokenizer, InferenceJob
from pytest_reward.reward.decorator import reward_function
from pytest_reward.reward.models import EvaluateResult, Message, MetricResult

from .conftest import bigram_job

#: GPT-2's convention: every text is read after <|endoftext|> (the bigram's "text start" row).
TOK = ByteTokenizer(("<|endoftext|>", "<|im_start|>", "<|im_end|>"), add_bos_token=True)
EOT, IM_END = 256, 258
V = TOK.vocab_size  # 259


def _table() -> np.ndarray:
    t = np.zeros((V, V), np.float32)
    o = ord
    t[EOT, o("a")] = 3  # text start -> "a"
    t[o("a"), o("b")] = 8  # comparisons: "a" -> "b" likely, "z" unlikely
    t[o("b"), o("c")] = 1
    t[o("z"), 0] = 12  # "z" -> NUL and "z" -> "c" likely: what the off-by-one scores instead
    t[o("z"), o("c")] = 12
    t[o("m"), o("n")] = 5  # mean vs sum: "n" alone vs "pq" (with "q" certain after "p")
    t[o("m"), o("p")] = 4.5
    t[o("p"), o("q")] = 15
    t[o("\n"), o("B")] = 10  # chat: after "assistant\n" the model answers "B<|im_end|>\n" and goes on
    t[o("B"), IM_END] = 10
    t[IM_END, o("\n")] = 10
    return t


TABLE = _table()


def logprob(prev: int, token: int) -> float:
    row = TABLE[prev].astype(np.float64)
    return float(row[token] - np.log(np.exp(row).sum()))


def text_logprobs(text: str, start: int = EOT) -> list[float]:
    ids = [start, *TOK.encode(text)]
    return [logprob(a, b) for a, b in itertools.pairwise(ids)]


@pytest.fixture(scope="module")
def bigram() -> InferenceJob:
    return bigram_job(TABLE, TOK, per_device_batch_size=8)


# ---------------------------------------------------------------------------------------------- example classes
class _Rows:
    """The dataset side of the example classes: ``get(i)`` is the ``i``-th of the rows given."""

    def __init__(self, rows, **kwargs):
        super().__init__(**kwargs)
        self.rows = list(rows)

    def __len__(self):
        return len(self.rows)

    def get(self, i):
        return self.rows[i]


class _Texts(_Rows, PerplexityEvaluation):
    name = "texts_ppl"


class _Choices(_Rows, PerplexityComparisonEvaluation):
    name = "choices"

    def __init__(self, items, selection="mean"):
        super().__init__(items)
        self.selection = selection


class _Echo(_Rows, EncodingEvaluation):
    name = "echo"

    def check(self, x, y_hat):
        return x == y_hat


class _Letters(_Rows, RolloutEvaluation):
    """Chat prompts; the expected answer is a letter."""

    name = "letters"

    def __init__(self, rows, new_tokens=8, **kw):
        super().__init__(rows, **kw)
        self.new_tokens = new_tokens

    def max_new_tokens(self, inference):
        return self.new_tokens

    def clean(self, y_hat):
        return y_hat.strip().upper()

    def check(self, y, y_hat):
        return y.strip().upper() == y_hat


def chat(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


# ---------------------------------------------------------------------------------------------- reductions
def test_reduce_scores():
    assert reduce_scores([1.0, 2.0, 6.0], "mean") == pytest.approx(3.0)
    assert reduce_scores([1.0, 2.0, 6.0], "sum") == pytest.approx(9.0)
    np.testing.assert_array_equal(reduce_scores([1.0, 2.0], "none"), [1.0, 2.0])
    assert reduce_scores([], "sum") == 0.0
    with pytest.raises(ValueError, match="undefined"):
        reduce_scores([], "mean")
    for bad in ("max", "MEAN", None):
        with pytest.raises(ValueError, match=r"reduce must be one of 'mean', 'sum', 'none'"):
            reduce_scores([1.0], bad)


# ---------------------------------------------------------------------------------------------- perplexity
TEXTS = ["ab", "abc", "zcq"]


def hand_ppl(text: str) -> tuple[float, float, int]:
    lps = text_logprobs(text)
    nll = -sum(lps)
    return float(np.exp(nll / len(lps))), nll, len(lps)


def test_perplexity_against_hand_computed_values(bigram):
    ev = _Texts(TEXTS)
    expected = [hand_ppl(t) for t in TEXTS]
    samples = ev.evaluate_samples(bigram)
    assert [s.index for s in samples] == [0, 1, 2]
    for s, (ppl, nll, n), text in zip(samples, expected, TEXTS, strict=True):
        assert s.input == text and s.output is None and s.target is None
        assert s.score == pytest.approx(ppl, rel=1e-5)
        assert s.metrics == {"nll": pytest.approx(nll, rel=1e-5), "tokens": float(n)}
    ppls = [e[0] for e in expected]
    assert ev(bigram) == pytest.approx(np.mean(ppls), rel=1e-5)  # mean of per-sample ppl
    assert ev(bigram, reduce="sum") == pytest.approx(sum(ppls), rel=1e-5)
    np.testing.assert_allclose(ev(bigram, reduce="none"), ppls, rtol=1e-5)
    corpus = np.exp(sum(e[1] for e in expected) / sum(e[2] for e in expected))
    assert _Texts.corpus_perplexity(samples) == pytest.approx(corpus, rel=1e-5)
    assert bigram.perplexity(TEXTS) == pytest.approx(corpus, rel=1e-5)  # the job's corpus ppl agrees


def test_perplexity_is_lower_for_the_likelier_text_and_its_aggregate_reduces_the_per_sample_values(bigram):
    """Each sample's score is its perplexity (lower is better, never below 1), and the aggregate is the
    reduction of exactly those values: their mean, not the corpus perplexity, and not 1/ppl anywhere."""
    texts = ["abc", "xyw"]  # "abc" is what the bigram predicts; "xyw" is uniform noise to it
    ev = _Texts(texts)
    samples = ev.evaluate_samples(bigram)
    per_sample = [s.score for s in samples]
    expected = [hand_ppl(t)[0] for t in texts]
    assert per_sample == pytest.approx(expected, rel=1e-5)
    assert per_sample[0] < per_sample[1]  # the predictable text has the lower perplexity
    assert all(p >= 1.0 for p in per_sample)  # a perplexity, not 1/ppl
    assert ev(bigram, reduce="mean") == pytest.approx(np.mean(expected), rel=1e-5)
    # the corpus perplexity, exp(total nll / total tokens), is another number here: the mean is not it
    corpus = np.exp(sum(hand_ppl(t)[1] for t in texts) / sum(hand_ppl(t)[2] for t in texts))
    assert ev(bigram, reduce="mean") != pytest.approx(corpus, rel=1e-3)


def test_reduce_sum_sums_the_per_sample_values(bigram):
    """reduce="sum" adds the per-sample perplexities (which the mean would not give here)."""
    ev = _Texts(TEXTS)
    expected = [hand_ppl(t)[0] for t in TEXTS]
    assert ev(bigram, reduce="sum") == pytest.approx(sum(expected), rel=1e-5)
    assert ev(bigram, reduce="mean") == pytest.approx(np.mean(expected), rel=1e-5)
    assert sum(expected) != pytest.approx(np.mean(expected), rel=1e-3)  # the case tells the two apart
    # and for an evaluation whose scores are 0/1
    comp = _Choices([("a", ["b", "z"], 0), ("a", ["b", "z"], 1), ("a", ["bc", "zc"], 0)])
    assert comp(bigram, reduce="sum") == pytest.approx(2.0)
    assert comp(bigram, reduce="mean") == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="reduce must be one of"):
        comp(bigram, reduce="max")


# ---------------------------------------------------------------------------------------------- comparison
@pytest.mark.parametrize(
    ("prefix", "conts"),
    [("a", ["b", "z"]), ("a", ["bc", "zc"])],
    ids=["single-token-choices", "multi-token-choices"],
)
def test_comparison_scores_exactly_the_continuation_tokens(bigram, prefix, conts):
    """A choice is scored by log p(continuation | prefix), its first token included and nothing after its last.
    After "a", "b" is far likelier than "z"; after "z", token 0 and "c" are likely: scoring from the second
    continuation token on, or the token after the end, would pick "z..." instead."""
    # the case tells the two apart: the first token decides it, the tokens after it point the other way
    assert logprob(ord("a"), ord("b")) > logprob(ord("a"), ord("z"))
    after_first = {
        c: logprob(ord(c[-1]), 0) + sum(logprob(*map(ord, p)) for p in itertools.pairwise(c)) for c in conts
    }
    assert after_first[conts[1]] > after_first[conts[0]]
    [sample] = _Choices([(prefix, conts, 0)]).evaluate_samples(bigram)
    assert sample.output == conts[0] and sample.target == conts[0]
    assert sample.score == 1.0 and sample.metrics == {"correct": 1.0}
    # hand-computed: log p(continuation | prefix), first token included
    for cont in conts:
        ids = TOK.encode(prefix + cont)
        lp = sum(logprob(a, b) for a, b in itertools.pairwise(ids))
        [ll] = bigram.loglikelihood([(prefix, cont)])
        assert ll.logprob == pytest.approx(lp, rel=1e-5) and ll.num_tokens == len(cont)
    assert sample.reason.startswith(f"chose 0 {conts[0]!r} of 2")


def test_comparison_mean_vs_sum_selection(bigram):
    """'n' (one likely token) against 'pq' (a less likely token, then a certain one): the sum prefers 'n', the
    per-token mean prefers 'pq'."""
    lp_n = logprob(ord("m"), ord("n"))
    lp_pq = logprob(ord("m"), ord("p")) + logprob(ord("p"), ord("q"))
    assert lp_n > lp_pq and lp_pq / 2 > lp_n  # the two rules disagree on this item
    item = ("m", ["n", "pq"], 1)
    [mean] = _Choices([item], selection="mean").evaluate_samples(bigram)
    [total] = _Choices([item], selection="sum").evaluate_samples(bigram)
    assert (mean.output, mean.score) == ("pq", 1.0)
    assert (total.output, total.score) == ("n", 0.0)
    # single-token choices: mean and sum agree
    for selection in ("mean", "sum"):
        [s] = _Choices([("a", ["z", "b"], 1)], selection=selection).evaluate_samples(bigram)
        assert s.output == "b" and s.score == 1.0
    with pytest.raises(EvaluationError, match="selection must be"):
        _Choices([item], selection="max").evaluate_samples(bigram)


def test_comparison_ties_go_to_the_first_choice(bigram):
    [s] = _Choices([("x", ["y", "w"], 1)]).evaluate_samples(bigram)  # row "x" is uniform: a tie
    assert s.output == "y" and s.score == 0.0


# ---------------------------------------------------------------------------------------------- rollouts / clean
def test_clean_receives_the_generated_answer_cut_at_its_end_marker(bigram):
    """The model answers "B<|im_end|>\\n..." and goes on; clean() gets the generated text up to the first end
    marker ("B"), not the prompt and not what follows the marker, so the check passes."""
    ev = _Letters([(chat("Which?"), "b")])
    raw = bigram.rollout([chat("Which?")], max_new_tokens=8)[0]
    assert raw.text.startswith("B<|im_end|>\n")  # the model does end its turn with <|im_end|>, then goes on
    assert ev.check("b", ev.clean(raw.text)) is False  # the text past the marker would fail the check

    seen = []

    class Spy(_Letters):
        def clean(self, y_hat):
            seen.append(y_hat)
            return super().clean(y_hat)

    [s] = Spy([(chat("Which?"), "b")]).evaluate_samples(bigram)
    assert seen == ["B"]  # generated only: no prompt, no <|im_end|>
    assert (s.output, s.score, s.metrics) == ("B", 1.0, {"correct": 1.0})
    assert s.input == chat("Which?") and s.target == "b"
    assert ev(bigram) == 1.0


def test_plain_prompt_and_stop_strings(bigram):
    class Plain(_Letters):
        stop = ("\n",)

    # plain prompt ending in "\n": the answer is again "B"; with no end markers the stop string would cut it
    [s] = Plain([("Question?\n", "B")]).evaluate_samples(bigram)
    assert s.output == "B" and s.score == 1.0

    class NoMarkers(_Letters):
        end_markers = ()

    [s] = NoMarkers([("Q\n", "B")]).evaluate_samples(bigram)
    assert s.output.startswith("B<|IM_END|>")  # without end markers, the raw text reaches clean()


def test_rollouts_are_one_batched_job_call_and_share_compiled_programs(bigram):
    rows = [(chat(f"question {k}"), "b") for k in range(12)]
    _Letters(rows)(bigram)  # warm
    before_compiles = bigram.stats.compiles
    calls, scored = bigram.stats.rollout_calls, bigram.stats.score_calls
    assert _Letters(rows)(bigram) == 1.0  # a new instance: no new compile, one job call for 12 prompts
    assert bigram.stats.rollout_calls == calls + 1
    _Texts(TEXTS * 5)(bigram)
    _Choices([("a", ["b", "z"], 0)] * 9)(bigram)
    assert bigram.stats.score_calls == scored + 2  # one scoring call per evaluation
    assert bigram.stats.compiles <= before_compiles + 2  # at most the new scoring length buckets


def test_samples_per_prompt_and_rollout_intermediates(bigram):
    rows = [(chat("q1"), "b"), ("plain\n", "x")]
    ev = _Letters(rows, new_tokens=6)
    samples = ev.evaluate_samples(bigram, samples_per_prompt=3, temperature=1.0, seed=0)
    assert [s.index for s in samples] == [0, 0, 0, 1, 1, 1]  # a prompt's samples are consecutive, in order
    assert [s.target for s in samples] == ["b"] * 3 + ["x"] * 3
    value, inter = ev(bigram, return_intermediates=True)
    assert value == pytest.approx(0.5)
    assert len(inter) == 2
    budget = bigram.block_size - 6
    for row, (prompt, _) in zip(inter, rows, strict=True):
        x, padding = row  # the seed's pair
        action = row.action_mask
        assert x.shape == action.shape == padding.shape == (bigram.block_size,)
        assert x.dtype == np.int32 and action.dtype == bool and padding.dtype == bool
        assert not action[:budget].any() and action[budget]  # the generation starts at the budget
        prompt_ids = [
            EOT,
            *TOK.encode(prompt if isinstance(prompt, str) else TOK.apply_chat_template(prompt)),
        ]
        assert x[budget - len(prompt_ids) : budget].tolist() == prompt_ids  # as fed: after the start token
        assert padding[budget - len(prompt_ids) :].sum() == len(prompt_ids) + action.sum()
        assert not padding[: budget - len(prompt_ids)].any()
    # greedy: 6 new tokens, no stop token ("B<|im_end|>\nB<|im_end|>")
    assert inter[0].action_mask.sum() == 6


# ---------------------------------------------------------------------------------------------- encoding evaluation
def test_encoding_evaluation_against_hand_computed_predictions(bigram):
    # argmax after start -> "a", after "a" -> "b", after "b" -> "c": "abc" is reproduced, "abd" is not
    samples = _Echo(["abc", "abd"]).evaluate_samples(bigram)
    assert [s.output for s in samples] == ["abc", "abc"]
    assert [s.score for s in samples] == [1.0, 0.0]
    assert samples[0].metrics == {"correct": 1.0, "token_accuracy": 1.0}
    assert samples[1].metrics == {"correct": 0.0, "token_accuracy": pytest.approx(2 / 3)}
    value, inter = _Echo(["abc", "abd"])(bigram, return_intermediates=True)
    assert value == 0.5
    x, padding = inter[0]
    assert x.tolist() == [EOT, *TOK.encode("abc")] and inter[0].action_mask.tolist() == [
        False,
        True,
        True,
        True,
    ]
    assert padding.all()


# ---------------------------------------------------------------------------------------------- per-sample view
@pytest.mark.parametrize("kind", ["rollout", "encoding", "perplexity", "comparison"])
def test_evaluate_samples_and_call_agree(random_gpt, kind):
    """``__call__`` is exactly a reduction of ``evaluate_samples``' scores, for every class (tiny random GPT)."""
    if kind == "rollout":

        class Ev(RolloutEvaluation):
            name = "digits"

            def __len__(self):
                return 5

            def get(self, i):
                return f"count {i}:", str(i)

            def max_new_tokens(self, inference):
                return 5

            def score(self, ys, y_hats):
                return [float(sum(c.isalpha() for c in h)) for h in y_hats]

        ev: Evaluation = Ev()
    elif kind == "encoding":

        class Ev2(_Echo):
            def score(self, xs, y_hats):
                return [
                    float(sum(a == b for a, b in zip(x, y, strict=False)))
                    for x, y in zip(xs, y_hats, strict=True)
                ]

        ev = Ev2(["hello world", "abc", "the cat sat"])
    elif kind == "perplexity":
        ev = _Texts(["hello world", "abc", "the cat sat on the mat"])
    else:
        ev = _Choices([("the ", ["cat", "dog", "x"], 0), ("", ["hi", "yo"], 1), ("a b", [" c", " d"], 0)])
    samples = ev.evaluate_samples(random_gpt)
    assert all(isinstance(s, EvaluationSample) for s in samples)
    scores = [s.score for s in samples]
    assert ev(random_gpt, reduce="mean") == pytest.approx(np.mean(scores))
    assert ev(random_gpt, reduce="sum") == pytest.approx(np.sum(scores))
    np.testing.assert_allclose(ev(random_gpt, reduce="none"), scores)
    value, inter = ev(random_gpt, reduce="none", return_intermediates=True)
    np.testing.assert_allclose(value, scores)
    assert len(inter) == len(samples)
    for row in inter:  # the seed's shape: (x, padding_mask) numpy pairs; the action mask as an attribute
        x, m = row
        assert len(row) == 2 and x.dtype == np.int32 and m.dtype == bool and x.shape == m.shape
        assert row.action_mask.shape == x.shape and not (row.action_mask & ~m).any()
    with pytest.raises(AttributeError):
        samples[0].score = 1.0  # frozen


@pytest.mark.parametrize("start", [None, 256], ids=["bare", "start-token"])
def test_perplexity_on_a_random_model_matches_numpy_over_its_logits(random_gpt, start):
    """Hand computation from the job's raw logits (a separate compiled program), under both conventions: with a
    start token every character is scored, without one every character but the first."""
    job = InferenceJob(random_gpt.config, random_gpt.params, per_device_batch_size=8, start_token=start)
    texts = ["hello world", "abc"]
    got = _Texts(texts).evaluate_samples(job)
    for s, text in zip(got, texts, strict=True):
        ids = ([] if start is None else [start]) + job.tokenizer.encode(text)
        [logits] = job.logits([ids[:-1]])
        lg = logits.astype(np.float64)
        lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
        nll = float(sum(lse[t] - lg[t, ids[t + 1]] for t in range(len(ids) - 1)))
        scored = len(text) if start is not None else len(text) - 1
        assert s.metrics == {"nll": pytest.approx(nll, rel=1e-4), "tokens": float(scored)}
        assert s.score == pytest.approx(np.exp(nll / scored), rel=1e-4)


# ---------------------------------------------------------------------------------------------- reward functions
@reward_function
def says_b(messages: list[Message], ground_truth=None, **kwargs):
    answer = messages[-1].content
    return EvaluateResult(
        score=float(answer.strip() == ground_truth),
        reason=f"answer {answer!r}",
        metrics={"exact": MetricResult(score=float(answer == ground_truth), reason="exact")},
    )


def test_reward_function_scores_rollouts(bigram):
    rows = [(chat("q"), "B"), (chat("r"), "C"), ("plain\n", "B")]
    samples = _Letters(rows, reward=says_b).evaluate_samples(bigram)
    assert [s.score for s in samples] == [1.0, 0.0, 1.0]
    assert samples[0].reason == "answer 'B'"  # the reward function saw the generated text, end marker cut
    assert samples[0].metrics == {"exact": 1.0} and samples[0].error is None
    assert _Letters(rows, reward=says_b)(bigram) == pytest.approx(2 / 3)


def test_reward_function_as_class_attribute_async_and_batch(bigram):
    class WithAttr(_Letters):
        reward = says_b

    class WithStatic(_Letters):
        reward = staticmethod(says_b)

    assert WithAttr([(chat("q"), "B")])(bigram) == 1.0
    assert WithStatic([(chat("q"), "B")])(bigram) == 1.0

    @reward_function
    async def async_reward(messages, ground_truth=None, **kwargs):
        return {"score": 0.25}

    assert _Letters([(chat("q"), "B")], reward=async_reward)(bigram) == 0.25

    seen = {}

    @reward_function(mode="batch")
    def batch_reward(rollouts_messages, ground_truth=None, **kwargs):
        seen["n"], seen["gt"] = len(rollouts_messages), ground_truth
        return [EvaluateResult(score=float(m[-1]["content"] == "B")) for m in rollouts_messages]

    assert _Letters([(chat("q"), "B"), (chat("r"), "B")], reward=batch_reward)(bigram) == 1.0
    assert seen == {"n": 2, "gt": ["B", "B"]}

    def foreign(messages, ground_truth=None, **kwargs):  # reward-kit marks functions with this attribute
        return EvaluateResult(score=0.5)

    foreign._reward_function_mode = "pointwise"
    assert _Letters([(chat("q"), "B")], reward=foreign)(bigram) == 0.5


def test_reward_function_errors_score_zero_and_are_recorded(bigram):
    @reward_function
    def fragile(messages, ground_truth=None, **kwargs):
        if ground_truth == "boom":
            raise RuntimeError("reward exploded")
        if ground_truth == "nan":
            return EvaluateResult(score=float("nan"))
        if ground_truth == "bad":
            return {"no_score": 1}
        return EvaluateResult(score=1.0)

    rows = [(chat("q"), "ok"), (chat("q"), "boom"), (chat("q"), "nan"), (chat("q"), "bad")]
    samples = _Letters(rows, reward=fragile).evaluate_samples(bigram)
    assert [s.score for s in samples] == [1.0, 0.0, 0.0, 0.0]
    assert samples[0].error is None
    assert samples[1].error == "RuntimeError: reward exploded"
    assert "non-finite" in samples[2].error
    assert "fragile" in samples[3].error and "validation" in samples[3].error
    assert _Letters(rows, reward=fragile)(bigram) == 0.25

    @reward_function(mode="batch")
    def short_batch(rollouts_messages, **kwargs):
        return [EvaluateResult(score=1.0)]

    samples = _Letters(rows[:2], reward=short_batch).evaluate_samples(bigram)
    assert [s.score for s in samples] == [0.0, 0.0]
    error = "InvalidResult: batch reward function 'short_batch' returned 1 results for 2 samples"
    assert [s.error for s in samples] == [error, error]


def test_reward_function_declaring_original_messages_receives_the_prompt_turns(bigram):
    """Regression: the evaluation had its own calling convention and never passed ``original_messages``; a
    test run passes it (the conversation before the response) when the function
    declares it, and so do evaluations now (pointwise and batch)."""
    seen = []

    @reward_function
    def sees_history(messages, original_messages, ground_truth=None, **kwargs):
        seen.append(original_messages)
        return EvaluateResult(score=float(original_messages == messages[:-1]))

    prompt = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Which?"}]
    rows = [(prompt, "B"), ("plain\n", "B")]
    samples = _Letters(rows, reward=sees_history).evaluate_samples(bigram)
    assert [s.error for s in samples] == [None, None] and [s.score for s in samples] == [1.0, 1.0]
    assert seen == [prompt, [{"role": "user", "content": "plain\n"}]]

    @reward_function(mode="batch")
    def sees_histories(rollouts_messages, original_messages, **kwargs):
        seen.append(original_messages)
        return [EvaluateResult(score=1.0) for _ in rollouts_messages]

    seen.clear()
    assert _Letters(rows, reward=sees_histories)(bigram) == 1.0
    assert seen == [[prompt, [{"role": "user", "content": "plain\n"}]]]


def test_a_missing_target_leaves_the_ground_truth_default(bigram):
    """Regression: the evaluation passed ``ground_truth=None`` explicitly, overriding the function's
    default; now a ``None`` target is not passed, as in a test run, and a real target still is."""

    @reward_function
    def with_default(messages, ground_truth="default", **kwargs):
        return EvaluateResult(score=1.0, reason=f"ground truth {ground_truth!r}")

    samples = _Letters([(chat("q"), None), (chat("r"), "B")], reward=with_default).evaluate_samples(bigram)
    assert [s.reason for s in samples] == ["ground truth 'default'", "ground truth 'B'"]

    seen = {}

    @reward_function(mode="batch")
    def batch_default(rollouts_messages, ground_truth="default", **kwargs):
        seen["gt"] = ground_truth
        return [EvaluateResult(score=1.0) for _ in rollouts_messages]

    assert _Letters([(chat("q"), None), (chat("r"), None)], reward=batch_default)(bigram) == 1.0
    assert seen == {"gt": "default"}  # no target at all: the keyword is not passed


def test_undecorated_reward_is_rejected(bigram):
    with pytest.raises(TypeError, match="@reward_function"):
        _Letters([(chat("q"), "B")], reward=lambda **kw: 1.0)

    class _Attr(_Letters):
        reward = staticmethod(lambda **kw: 1.0)

    calls = bigram.stats.rollout_calls
    with pytest.raises(TypeError, match="@reward_function"):
        _Attr([(chat("q"), "B")])(bigram)
    assert bigram.stats.rollout_calls == calls  # rejected before generating anything


# ---------------------------------------------------------------------------------------------- bad input
def test_empty_evaluation_is_a_clear_error(bigram):
    for ev in (_Texts([]), _Choices([]), _Echo([]), _Letters([])):
        with pytest.raises(EvaluationError, match=rf"evaluation '{ev.name}' has no samples"):
            ev(bigram)
        with pytest.raises(EvaluationError, match="nothing to evaluate"):
            ev.evaluate_samples(bigram)


def test_prompt_longer_than_the_context_names_the_sample(bigram):
    rows = [("short\n", "B"), ("x" * 100, "B"), ("short\n", "B")]
    with pytest.raises(  # 100 characters and the start token
        EvaluationError, match=r"evaluation 'letters', sample 1: the prompt has 101 tokens as read.*64"
    ):
        _Letters(rows)(bigram)

    class Left(_Letters):
        truncate = "left"

    assert Left([("x" * 100 + "\n", "B")])(bigram) == 1.0  # keeps the prompt's end, where the cue is
    with pytest.raises(
        EvaluationError, match="sample 2: the text has 81 tokens as read, more than block_size=64"
    ):
        _Echo(["abc", "abc", "a" * 80])(bigram)
    with pytest.raises(EvaluationError, match="leave room for a prompt"):
        _Letters(rows, new_tokens=64)(bigram)


def test_tokenizer_mismatch_is_a_clear_error(bigram):
    big = ByteTokenizer(("<|endoftext|>", *[f"<|extra_{k}|>" for k in range(50)]))  # 307 tokens > 259
    with pytest.raises(EvaluationError, match=r"encoding has 307 tokens but the model only 259"):
        _Texts(["abc"])(bigram, big)
    # a job whose own tokenizer is larger than its model: the offending id is reported with its sample
    small = bigram_job(np.zeros((258, 258), np.float32), big)
    with pytest.raises(EvaluationError, match=r"sample 1: token id 301 is outside the model's vocabulary"):
        _Texts(["abc", "a<|extra_44|>"])(small)
    with pytest.raises(EvaluationError, match=r"sample 0: token id 261"):
        _Letters([("<|extra_4|>", "B")])(small)


def test_another_compatible_encoding_is_used(bigram):
    plain = ByteTokenizer()  # 257 tokens, the same ids for ordinary text
    assert _Texts(TEXTS)(bigram, plain) == pytest.approx(_Texts(TEXTS)(bigram))

    class TheseusStyle:  # only what theseus's encodings have
        eot_token = EOT

        def encode(self, text, allowed_special="all"):
            return list(text.encode())

        def decode(self, tokens):
            return bytes(t for t in tokens if t < 256).decode()

    assert _Texts(TEXTS)(bigram, TheseusStyle()) == pytest.approx(_Texts(TEXTS)(bigram))
    assert bigram.tokenizer is TOK  # the job was not modified


def test_malformed_samples_name_the_index(bigram):
    class Broken(_Letters):
        def get(self, i):
            if i == 1:
                raise KeyError("missing")
            return super().get(i)

    with pytest.raises(EvaluationError, match=r"get\(1\) raised KeyError"):
        Broken([("a", "b")] * 3)(bigram)
    with pytest.raises(EvaluationError, match=r"get\(0\) must return \(prompt, expected\)"):
        _Letters(["just a prompt"])(bigram)
    with pytest.raises(EvaluationError, match=r"get\(0\) must return \(prefix, \[continuations...\]"):
        _Choices([("a", ["b"], 3)])(bigram)
    with pytest.raises(EvaluationError, match="sample 0: the text is empty"):
        _Texts([""])(bigram)

    class NoBudget(_Letters):
        max_new_tokens = RolloutEvaluation.max_new_tokens

    with pytest.raises(NotImplementedError, match="must override max_new_tokens"):
        NoBudget([("a", "b")])(bigram)


def test_job_length_selects_a_seeded_subset(bigram):
    """theseus's ``eval/length``: a job with ``length = k`` evaluates a random subset of k samples."""
    texts = ["ab", "abc", "zc", "mn", "pq"]
    bigram.length = 2
    try:
        samples = _Texts(texts).evaluate_samples(bigram)
    finally:
        bigram.length = -1
    assert len(samples) == 2 and len({s.index for s in samples}) == 2
    assert all(s.input == texts[s.index] for s in samples)
    assert len(_Texts(texts).evaluate_samples(bigram)) == 5


def test_a_direct_subclass_implements_evaluate_samples(bigram):
    class _Lengths(Evaluation):
        name = "lengths"

        def __len__(self):
            return 3

        def evaluate_samples(self, inference, encoding=None, intermediates=None, **kwargs):
            if intermediates is not None:
                intermediates.append("row")
            return [EvaluationSample(index=i, input="x" * i, score=float(i)) for i in range(3)]

    ev = _Lengths()
    assert ev.prefix() == "lengths_"
    assert ev(bigram) == 1.0 and ev(bigram, reduce="sum") == 3.0
    assert ev(bigram, return_intermediates=True) == (1.0, ["row"])
    with pytest.raises(NotImplementedError):
        ev.score()


# ---------------------------------------------------------------------------------------------- the job protocol
#: Every member of the ModelJob protocol: the attributes it annotates and the methods it declares.
PROTOCOL = set(ModelJob.__annotations__) | {n for n in vars(ModelJob) if not n.startswith("_")}


class _OnlyTheProtocol:
    """A job that forwards exactly the ModelJob members to a real job; any other member is an AttributeError."""

    def __init__(self, job, own=None):
        object.__setattr__(self, "_job", job)
        object.__setattr__(self, "_own", dict(own or {}))

    def __getattr__(self, name):
        if name not in PROTOCOL:
            raise AttributeError(f"an evaluation used job.{name}, which ModelJob does not name")
        own = object.__getattribute__(self, "_own")
        return own[name] if name in own else getattr(object.__getattribute__(self, "_job"), name)

    def __setattr__(self, name, value):
        if name not in PROTOCOL:
            raise AttributeError(f"an evaluation set job.{name}, which ModelJob does not name")
        self._own[name] = value

    def __copy__(self):
        return _OnlyTheProtocol(self._job, self._own)


def test_evaluations_use_only_the_model_job_protocol(bigram):
    """ModelJob names what the evaluations use of a job: each class (and a foreign encoding's view of the job)
    runs on a job that has nothing else, with the same scores as on the InferenceJob itself."""
    assert isinstance(bigram, ModelJob) and not isinstance(object(), ModelJob)
    narrow = _OnlyTheProtocol(bigram)
    with pytest.raises(AttributeError, match="ModelJob does not name"):
        narrow.stats  # noqa: B018 - the proxy really hides what the protocol does not name

    class TheseusStyle:  # a foreign encoding: the evaluation runs on a copy of the job with it
        eot_token = EOT

        def encode(self, text, allowed_special="all"):
            return TOK.encode(text, allowed_special=allowed_special)

        def decode(self, tokens):
            return TOK.decode(tokens)

    evaluations = [
        (_Letters([(chat("Which?"), "b"), ("plain\n", "B")]), None),
        (_Echo(["abc", "abd"]), None),
        (_Texts(TEXTS), None),
        (_Choices([("a", ["b", "z"], 0), ("m", ["n", "pq"], 1)]), None),
        (_Texts(TEXTS), TheseusStyle()),
        (_Letters([(chat("Which?"), "b")]), TheseusStyle()),
    ]
    for ev, encoding in evaluations:
        want = ev(bigram, encoding, reduce="none", return_intermediates=True)
        got = ev(narrow, encoding, reduce="none", return_intermediates=True)
        np.testing.assert_allclose(got[0], want[0])
        for a, b in zip(got[1], want[1], strict=True):
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(a.action_mask, b.action_mask)
    narrow.length = 2  # the job's random subset goes through the protocol too
    assert len(_Texts(TEXTS).evaluate_samples(narrow)) == 2
    assert bigram.length == -1


def test_the_engine_alias_is_the_same_api():
    """``pytest_reward.jax.evaluation`` is kept for existing code: the very same objects."""
    import pytest_reward.jax.evaluation as alias

    import pytest_reward.errors
    import pytest_reward.evaluation as evaluation

    before = {  # what the module exported when the API lived in the engine
        "END_MARKERS",
        "REDUCTIONS",
        "EncodingEvaluation",
        "Evaluation",
        "EvaluationError",
        "EvaluationSample",
        "Evaluator",
        "PerplexityComparisonEvaluation",
        "PerplexityEvaluation",
        "RolloutEvaluation",
        "reduce_scores",
    }
    assert before <= set(alias.__all__) == set(evaluation.__all__)
    for name in evaluation.__all__:
        assert getattr(alias, name) is getattr(evaluation, name), name
    assert alias.RolloutEvaluation is RolloutEvaluation
    assert alias.EvaluationError is evaluation.EvaluationError is pytest_reward.errors.EvaluationError
    assert issubclass(EvaluationError, pytest_reward.errors.RewardError)
    assert issubclass(EvaluationError, ValueError)


# ---------------------------------------------------------------------------------------------- seed shapes, chunk_size
def test_bug_intermediates_are_the_seeds_pairs(bigram):
    """Regression: ``return_intermediates=True`` gives one ``(x, padding_mask)`` pair of numpy arrays per sample
    (it gave triples, so ``x, m = row`` raised). The action mask is ``row.action_mask``."""
    evaluations = [
        _Letters([(chat("Which?"), "b"), ("plain\n", "B")]),
        _Echo(["abc", "abd"]),
        _Texts(TEXTS),
        _Choices([("a", ["b", "z"], 0), ("m", ["n", "pq"], 1)]),
    ]
    for ev in evaluations:
        _, rows = ev(bigram, return_intermediates=True)
        assert len(rows) == len(ev)
        for row in rows:
            x, m = row
            assert isinstance(x, np.ndarray) and isinstance(m, np.ndarray) and tuple(row) == (x, m)
            assert (row.x, row.padding_mask) == (x, m) and row.action_mask.dtype == bool
            assert row.action_mask.any() and not (row.action_mask & ~m).any()  # actions are real tokens
    import pickle

    again = pickle.loads(pickle.dumps(rows[0]))
    np.testing.assert_array_equal(again.action_mask, rows[0].action_mask)
    np.testing.assert_array_equal(again[0], rows[0][0])


def test_chunk_size_bounds_the_batches_in_flight(random_gpt):
    """``chunk_size`` is honoured: at most that many batches are dispatched before the host collects them, for
    every kind of job call, with the same results as all batches at once."""
    texts = [f"text number {k} to score" for k in range(40)]  # 8 rows per batch: 5 batches
    job = random_gpt

    def run(chunk_size):
        job.reset_stats()
        out = {
            "nll": job.token_nll(texts, chunk_size=chunk_size),
            "ll": [r.logprob for r in job.loglikelihood([(t, " x") for t in texts], chunk_size=chunk_size)],
            "pred": job.predictions([job.tokenizer.encode(t) for t in texts], chunk_size=chunk_size),
            "gen": job.generate_tokens([job.tokenizer.encode(t) for t in texts], 4, chunk_size=chunk_size)[0],
        }
        return out, job.stats.max_batches_in_flight

    everything, in_flight = run(None)
    assert in_flight == 5
    for chunk_size in (1, 2):
        got, in_flight = run(chunk_size)
        assert in_flight == chunk_size
        for a, b in zip(got["nll"], everything["nll"], strict=True):
            np.testing.assert_array_equal(a, b)
        assert got["ll"] == everything["ll"] and got["gen"] == everything["gen"]
        for a, b in zip(got["pred"], everything["pred"], strict=True):
            np.testing.assert_array_equal(a, b)
    # through the evaluations (the seed's default, 200, keeps all 5 in flight)
    all_at_once = _Texts(texts)(job, chunk_size=None)
    for chunk_size, expected in ((2, 2), (200, 5)):
        job.reset_stats()
        assert _Texts(texts)(job, chunk_size=chunk_size) == all_at_once
        assert job.stats.max_batches_in_flight == expected
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="chunk_size must be a positive number of batches"):
            job.token_nll(texts, chunk_size=bad)
