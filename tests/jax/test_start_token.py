"""The start-token convention: one setting of the job, declared by the checkpoint, used by every path.

A random GPT-2 checkpoint (written here by transformers, nothing downloaded) is saved twice: with a tokenizer that
declares GPT-2's ``<|endoftext|>`` start token (``"add_bos_token": true`` and a post-processor, so transformers'
own ``tokenizer(text)`` puts it in front) and with one that declares none. On each, every scoring path of ours
(``token_nll`` / ``PerplexityEvaluation``, ``EncodingEvaluation``, ``loglikelihood`` /
``PerplexityComparisonEvaluation``, rollouts) equals what transformers computes on the ids its own tokenizer gives.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pytest_reward.evaluation import (  # noqa: E402
    EncodingEvaluation,
    PerplexityComparisonEvaluation,
    PerplexityEvaluation,
    RolloutEvaluation,
)
from pytest_reward.jax import ByteTokenizer, InferenceJob  # noqa: E402

EOT = 256
TEXTS = ["pack my box with five dozen liquor jugs", "a", "zq", "the quick brown fox"]
CONVENTIONS = {"bare": False, "start-token": True}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[object, object, InferenceJob]]:
    """convention -> (transformers model, transformers tokenizer, our job), all from the same directory."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=257, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=EOT, eos_token_id=EOT
    )
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():  # sharper than the random init, so greedy choices are far from ties
        for p in model.parameters():
            if p.ndim >= 2:
                p.mul_(4.0)
    model.eval()
    root = tmp_path_factory.mktemp("start-token")
    model.save_pretrained(root / "weights")
    out = {}
    for name, add_bos in CONVENTIONS.items():
        d = root / name
        shutil.copytree(root / "weights", d)
        ByteTokenizer(add_bos_token=add_bos).save(d, model_max_length=64)
        hf_tok = transformers.AutoTokenizer.from_pretrained(d)
        out[name] = (model, hf_tok, InferenceJob.from_checkpoint(d, per_device_batch_size=4))
    return out


def hf_ids(hf_tok, text: str) -> list[int]:
    return list(hf_tok(text).input_ids)


def hf_logprobs(model, ids: list[int]) -> np.ndarray:
    """(len(ids), V) float64 log-probabilities: row t predicts token t + 1."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, -1).numpy()


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_the_job_takes_the_checkpoints_declared_start_token(checkpoints, convention):
    _, hf_tok, job = checkpoints[convention]
    assert job.start_token == (EOT if CONVENTIONS[convention] else None)
    # transformers' own tokenizer, from the same files, agrees on what goes in front of a text
    assert hf_ids(hf_tok, "hi") == job.with_start_token(job.tokenizer.encode("hi"))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_perplexity_equals_transformers(checkpoints, convention):
    """Per-document perplexity is ``exp(model(ids, labels=ids).loss)`` for the ids transformers' tokenizer gives:
    every token after the start token, or every token but the first without one."""
    model, hf_tok, job = checkpoints[convention]
    texts = [t for t in TEXTS if len(hf_ids(hf_tok, t)) > 1]  # transformers' loss needs a token to predict

    class Docs(PerplexityEvaluation):
        name = "docs"

        def __len__(self):
            return len(texts)

        def get(self, i):
            return texts[i]

    samples = Docs().evaluate_samples(job)
    nll = job.token_nll(texts)
    for text, sample, got in zip(texts, samples, nll, strict=True):
        ids = hf_ids(hf_tok, text)
        with torch.no_grad():
            loss = float(model(torch.tensor([ids]), labels=torch.tensor([ids])).loss)
        assert sample.score == pytest.approx(np.exp(loss), rel=1e-4)
        assert sample.metrics["tokens"] == len(ids) - 1
        lp = hf_logprobs(model, ids)
        np.testing.assert_allclose(got, -lp[np.arange(len(ids) - 1), ids[1:]], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(Docs()(job, reduce="none"), [s.score for s in samples])
    if convention == "bare":  # a one-token text has nothing to score without a start token
        assert len(job.token_nll(["a"])[0]) == 0


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_encoding_evaluation_predictions_equal_transformers_argmax(checkpoints, convention):
    model, hf_tok, job = checkpoints[convention]
    seen = []

    class Echo(EncodingEvaluation):
        name = "echo"

        def __len__(self):
            return len(TEXTS) - 1

        def get(self, i):
            return [t for t in TEXTS if t != "a"][i]

        def clean(self, y_hat):
            seen.append(y_hat)
            return y_hat

        def check(self, x, y_hat):
            return x.endswith(y_hat)

    samples = Echo().evaluate_samples(job)
    for sample, y_hat in zip(samples, seen, strict=True):
        ids = hf_ids(hf_tok, sample.input)
        predicted = hf_logprobs(model, ids)[:-1].argmax(-1)
        assert y_hat == job.tokenizer.decode(predicted.tolist())  # random bytes: compare decoded the same way
        # one guess per token that has a context: every token with a start token, all but the first without
        assert len(predicted) == len(sample.input) - (0 if CONVENTIONS[convention] else 1)
        assert sample.metrics["token_accuracy"] == pytest.approx(np.mean(predicted == np.asarray(ids[1:])))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_comparison_loglikelihoods_equal_transformers(checkpoints, convention):
    model, hf_tok, job = checkpoints[convention]
    items = [("the cat ", ["sat", "ran", "qz"], 0), ("x", ["yz", "w"], 1), ("pack my box", [" with", "!"], 0)]
    requests = [(prefix, cont) for prefix, conts, _ in items for cont in conts]
    results = iter(job.loglikelihood(requests))
    expected_choice = []
    for prefix, conts, _ in items:
        means = []
        for cont in conts:
            ctx, whole = hf_ids(hf_tok, prefix.rstrip()), hf_ids(hf_tok, prefix + cont)  # lm-eval's split
            lp = hf_logprobs(model, whole)
            positions = range(len(ctx) - 1, len(whole) - 1)
            expected = sum(float(lp[p, whole[p + 1]]) for p in positions)
            got = next(results)
            assert got.num_tokens == len(whole) - len(ctx)
            assert got.logprob == pytest.approx(expected, rel=1e-4, abs=1e-4)
            means.append(expected / got.num_tokens)
        expected_choice.append(int(np.argmax(means)))

    class Choices(PerplexityComparisonEvaluation):
        name = "choices"

        def __len__(self):
            return len(items)

        def get(self, i):
            return items[i]

    samples = Choices().evaluate_samples(job)
    assert [s.output for s in samples] == [
        conts[k] for (_, conts, _), k in zip(items, expected_choice, strict=True)
    ]


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_rollouts_equal_transformers_generate_from_its_tokenizers_ids(checkpoints, convention):
    model, hf_tok, job = checkpoints[convention]
    prompts = ["hello", "the cat sat", "zz"]
    new = 10

    class Continue(RolloutEvaluation):
        name = "continue"
        end_markers = ()

        def __len__(self):
            return len(prompts)

        def get(self, i):
            return prompts[i], None

        def max_new_tokens(self, inference):
            return new

        def clean(self, y_hat):
            return y_hat

        def score(self, ys, y_hats):
            return [0.0] * len(y_hats)

    _, rows = Continue()(job, return_intermediates=True)
    rollouts = job.rollout(prompts, max_new_tokens=new)
    for prompt, rollout, row in zip(prompts, rollouts, rows, strict=True):
        ids = hf_ids(hf_tok, prompt)
        assert list(rollout.prompt_tokens) == ids  # the prompt as fed is what transformers' tokenizer gives
        x, padding = row
        assert x[padding & ~row.action_mask].tolist() == ids
        x_t = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(
                x_t, attention_mask=torch.ones_like(x_t), max_new_tokens=new, do_sample=False,
                eos_token_id=EOT, pad_token_id=EOT,
            )[0, len(ids) :].tolist()  # fmt: skip
        if EOT in out:
            out = out[: out.index(EOT)]
        assert list(rollout.tokens) == out
        assert x[row.action_mask].tolist()[: len(out)] == out


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_bug_teacher_forcing_and_greedy_rollouts_read_the_same_context(checkpoints, convention):
    """Regression: scoring put end-of-text in front of every text while rollouts read the bare prompt,
    so on the shipped model teacher-forced answers were 0.000 right while greedy ones were 0.937. Under one
    convention the argmax given the prompt and a greedy continuation are the same thing: teacher-forcing
    ``prompt + greedy continuation`` predicts exactly that continuation, for every prompt."""
    _, _, job = checkpoints[convention]
    prompts = ["hello", "the cat sat", "zz", "q"]
    rollouts = job.rollout(prompts, max_new_tokens=8, ignore_eos=True)
    for prompt, rollout in zip(prompts, rollouts, strict=True):
        prompt_ids = job.tokenizer.encode(prompt)
        [predicted] = job.predictions([job.with_start_token(prompt_ids + list(rollout.tokens))[:-1]])
        assert predicted[-len(rollout.tokens) :].tolist() == list(rollout.tokens)


def test_start_token_setting(checkpoints):
    _, _, declared = checkpoints["start-token"]
    params, config = declared.params, declared.config
    assert InferenceJob(config, params, ByteTokenizer(add_bos_token=True)).start_token == EOT  # "auto"
    assert (
        InferenceJob(config, params, ByteTokenizer(add_bos_token=True), start_token=None).start_token is None
    )
    assert InferenceJob(config, params, start_token="<|endoftext|>").start_token == EOT
    assert InferenceJob(config, params, start_token=7).start_token == 7
    for bad in (257, -1, True, "ab"):
        with pytest.raises(ValueError, match="start_token"):
            InferenceJob(config, params, start_token=bad)
    job = InferenceJob(config, params, start_token=EOT)
    assert job.with_start_token([1, 2]) == [EOT, 1, 2]
    assert job.with_start_token([EOT, 1]) == [EOT, 1]  # already there (a chat template that writes it)
    assert job.with_start_token([]) == [EOT]
    bare = InferenceJob(config, params, start_token=None)
    assert bare.with_start_token([1, 2]) == [1, 2] and bare.with_start_token([]) == [EOT]  # end-of-text
    # a long prompt truncated from the left keeps its start token in front
    [fed] = job.generate_tokens([list(range(100))], 4, truncate="left")[1]
    assert fed == [EOT, *range(100 - 59, 100)] and len(fed) == 64 - 4
    with pytest.raises(ValueError, match=r"prompt 0 has 61 tokens \(the start token included\)"):
        job.generate_tokens([list(range(60))], 4)
