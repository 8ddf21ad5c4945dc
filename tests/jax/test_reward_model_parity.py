"""Reward models on the engine against transformers on the same checkpoints, to 1e-4.

Each pooling rule is checked against the stack that implements it:

* ``pooling="hf"``: the classifier's own forward (``GPT2ForSequenceClassification`` / ``GenericForSequenceClassification``:
  the rightmost token that is not the pad token), on right-padded batches as transformers pads them, and on
  left-padded batches given the position ids a trainer passes (without them GPT-2's learned positions would count
  the padding: transformers' defaults are ``arange(T)``);
* ``pooling="last_attended"``: the trunk and the ``score`` layer called the way OpenRLHF's reward model does
  (``eos_indices = L - 1 - attention_mask.fliplr().argmax(1)``, left padding) and verl's ``RewardModelWorker``
  does (``argmax(position_ids * attention_mask)``, right padding).

The batches mix lengths, rows that end with the end-of-sequence token (which is also the pad token here, GPT-2's
convention), rows that end with several, and rows that do not.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pytest_reward.jax import RewardModel  # noqa: E402

from .conftest import EOS  # noqa: E402

NAMES = ["gpt2", "llama", "qwen2", "qwen2-token"]


def mixed_rows(seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, EOS, n).tolist() for n in (7, 30, 1, 18, 45, 12)]
    rows[0] += [EOS]  # a trailing eos: the hf rule pools the token before it
    rows[3] += [EOS, EOS]  # two of them
    rows[4][10] = EOS  # an eos inside the text: a pad id that is no padding (attended)
    return rows


def _pad(rows: list[list[int]], side: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask, position ids (counted from each row's first token, as OpenRLHF and verl pass them)."""
    T = max(map(len, rows))
    ids = torch.full((len(rows), T), EOS, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        at = slice(T - len(r), T) if side == "left" else slice(0, len(r))
        ids[i, at] = torch.tensor(r)
        mask[i, at] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def hf_rule(hf, rows: list[list[int]], side: str) -> np.ndarray:
    """transformers' classifier forward: its pooling is the rightmost non-pad token of the padded batch."""
    ids, mask, pos = _pad(rows, side)
    with torch.no_grad():
        if hf.__class__.__name__.endswith("TokenClassification"):  # per-token logits: apply the rule here
            logits = hf(ids, attention_mask=mask, position_ids=pos).logits[..., 0]
            last = (torch.arange(ids.shape[1]) * (ids != EOS)).argmax(-1)
            return logits[torch.arange(len(rows)), last].numpy()
        kw = {"position_ids": pos} if side == "left" else {}
        return hf(ids, attention_mask=mask, **kw).logits[:, 0].numpy()


def last_attended_rule(hf, rows: list[list[int]], side: str) -> np.ndarray:
    """The trunk and ``score`` as OpenRLHF (left padding) and verl (right padding) call them."""
    ids, mask, pos = _pad(rows, side)
    trunk = getattr(hf, hf.base_model_prefix)
    with torch.no_grad():
        values = hf.score(trunk(ids, attention_mask=mask, position_ids=pos).last_hidden_state)[..., 0]
    if side == "left":  # openrlhf/models/model.py
        index = mask.shape[1] - 1 - mask.long().fliplr().argmax(dim=1)
    else:  # verl/workers/fsdp_workers.py, RewardModelWorker._forward_micro_batch
        index = torch.argmax(pos * mask, dim=-1)
    return values[torch.arange(len(rows)), index].numpy()


@pytest.fixture(scope="module")
def models(reward_checkpoints):
    return {
        (name, pooling): RewardModel.from_checkpoint(path, pooling=pooling)
        for name, (path, _) in reward_checkpoints.items()
        for pooling in ("hf", "last_attended")
    }


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", NAMES)
def test_hf_pooling_matches_transformers(reward_checkpoints, models, name, side):
    _, hf = reward_checkpoints[name]
    rows = mixed_rows()
    got = models[name, "hf"].score_ids(rows)
    np.testing.assert_allclose(got, hf_rule(hf, rows, side), atol=1e-4, rtol=0)
    assert got.dtype == np.float32


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", NAMES)
def test_last_attended_pooling_matches_openrlhf_and_verl(reward_checkpoints, models, name, side):
    _, hf = reward_checkpoints[name]
    rows = mixed_rows(1)
    got = models[name, "last_attended"].score_ids(rows)
    np.testing.assert_allclose(got, last_attended_rule(hf, rows, side), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_the_rules_differ_exactly_where_a_text_ends_with_the_pad_token(models, name):
    rows = mixed_rows(2)
    hf, last = models[name, "hf"].score_ids(rows), models[name, "last_attended"].score_ids(rows)
    ends_with_pad = np.array([r[-1] == EOS for r in rows])
    assert ends_with_pad.any() and not ends_with_pad.all()
    np.testing.assert_array_equal(hf[~ends_with_pad], last[~ends_with_pad])
    assert (np.abs(hf - last)[ends_with_pad] > 1e-3).all()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_row_of_pad_tokens_alone_pools_its_first_token_as_transformers(reward_checkpoints, models, name):
    _, hf = reward_checkpoints[name]
    row = [EOS, EOS, EOS]
    with torch.no_grad():
        expected = hf(torch.tensor([row])).logits[0, 0].item()
    assert models[name, "hf"].score_ids([row])[0] == pytest.approx(expected, abs=1e-4)


def test_a_chosen_label_of_a_multi_label_head_matches_that_column(reward_checkpoints_3_labels):
    checkpoints = reward_checkpoints_3_labels
    rows = mixed_rows(3)
    for name in ("gpt2", "qwen2-token"):
        path, hf = checkpoints[name]
        for label in (0, 2, "LABEL_1"):
            rm = RewardModel.from_checkpoint(path, label=label)
            column = label if isinstance(label, int) else 1
            ids, mask, _ = _pad(rows, "right")
            with torch.no_grad():
                logits = hf(ids, attention_mask=mask).logits
            if logits.ndim == 3:  # token classification: transformers' rule on the per-token logits
                last = (torch.arange(ids.shape[1]) * (ids != EOS)).argmax(-1)
                logits = logits[torch.arange(len(rows)), last]
            np.testing.assert_allclose(rm.score_ids(rows), logits[:, column].numpy(), atol=1e-4, rtol=0)


def test_score_texts_and_conversations_read_what_transformers_reads(reward_checkpoints, models):
    _, hf = reward_checkpoints["llama"]
    rm = models["llama", "hf"]
    chats = [
        [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello there"},
        ],
    ]
    texts = [rm.render(c) for c in chats]
    ids = [rm.encode(t) for t in texts]
    assert (
        texts[0] == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    )  # ChatML: no template
    expected = hf_rule(hf, ids, "right")
    np.testing.assert_allclose(rm.score_conversations(chats), expected, atol=1e-4, rtol=0)
    np.testing.assert_allclose(rm.score_texts(texts), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("pooling", ["hf", "last_attended"])
@pytest.mark.parametrize("name", NAMES)
def test_responses_sharing_a_prompt_match_transformers(reward_checkpoints, name, pooling):
    """The rows of a prompt run it once (``min_shared_prefix``): the scores are still the stacks' own."""
    _, hf = reward_checkpoints[name]
    rng = np.random.default_rng(4)
    prompts = [rng.integers(0, EOS, n).tolist() for n in (40, 33)]
    rows = [p + rng.integers(0, EOS, k).tolist() for p in prompts for k in (1, 9, 20)]
    rows[1] += [EOS]  # a response that ends with the end-of-sequence token
    rm = RewardModel.from_checkpoint(reward_checkpoints[name][0], pooling=pooling)
    got = rm.score_ids(rows)
    assert rm.stats.shared_tokens >= 2 * 32
    reference = hf_rule if pooling == "hf" else last_attended_rule
    np.testing.assert_allclose(got, reference(hf, rows, "right"), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_programs_compiled_without_ynnpack_fusions_match_transformers(reward_checkpoints, name):
    """A program of at least ``YNN_OFF_POSITIONS`` token positions is compiled with other XLA options on the CPU
    (module docstring of :data:`~pytest_reward.jax.reward_model.YNN_OFF_POSITIONS`): whole rows and shared
    prompts, its scores are still transformers' (and those of the small programs)."""
    from pytest_reward.jax.reward_model import YNN_OFF_POSITIONS, compiler_options

    path, hf = reward_checkpoints[name]
    rng = np.random.default_rng(5)
    rows = [rng.integers(0, EOS, n).tolist() for n in rng.integers(50, 64, 64)]  # one bucket: T = 64
    rows[3] += [EOS]
    whole = RewardModel.from_checkpoint(path, min_shared_prefix=None)
    got = whole.score_ids(rows, batch_size=64)
    assert whole.stats.compile_keys == [(64, 64)] and compiler_options("cpu", (64, 64))  # the other options
    np.testing.assert_allclose(got, hf_rule(hf, rows, "right"), atol=1e-4, rtol=0)
    small = whole.score_ids(rows, batch_size=8)  # (8, 64): 512 positions, XLA's defaults
    assert compiler_options("cpu", (8, 64)) == {} and YNN_OFF_POSITIONS > 8 * 64
    np.testing.assert_allclose(got, small, atol=1e-5, rtol=0)

    prompts = [rng.integers(0, EOS, 60).tolist() for _ in range(32)]
    pairs = [p + rng.integers(0, EOS, k).tolist() for p in prompts for k in (40, 45)]  # 64 rows, 32 prompts
    shared = RewardModel.from_checkpoint(path, min_shared_prefix=32)
    got = shared.score_ids(pairs, batch_size=64)
    (key,) = shared.stats.compile_keys
    assert len(key) == 4 and compiler_options("cpu", key)
    np.testing.assert_allclose(got, hf_rule(hf, pairs, "right"), atol=1e-4, rtol=0)


def test_the_compiler_options_by_program_size_and_platform():
    from pytest_reward.jax.reward_model import compiler_options, program_positions

    off = {"xla_cpu_experimental_ynn_fusion_type": ""}
    assert program_positions((16, 256)) == 4096 and program_positions((8, 128, 16, 128)) == 8 * 128 + 16 * 128
    assert compiler_options("cpu", (16, 256)) == off and compiler_options("cpu", (8, 128, 16, 128)) == {}
    assert compiler_options("cpu", (16, 255)) == {} and compiler_options("cpu", (16, 64, 64, 48)) == off
    assert compiler_options("gpu", (64, 1024)) == {} and compiler_options("tpu", (64, 1024)) == {}


def test_an_xla_without_the_option_compiles_its_default_program(reward_checkpoints, monkeypatch):
    """The option is experimental: an XLA that refuses it still gives the program, compiled as by default."""
    from pytest_reward.jax import reward_model

    monkeypatch.setattr(reward_model, "_YNN_OFF", {"xla_cpu_no_such_option_for_the_test": "x"})
    path, hf = reward_checkpoints["gpt2"]
    rows = [list(range(1, 60))] * 64
    rm = RewardModel.from_checkpoint(path, min_shared_prefix=None)
    got = rm.score_ids(rows, batch_size=64)
    assert rm.stats.compile_keys == [(64, 64)]
    np.testing.assert_allclose(got, hf_rule(hf, rows[:1], "right").repeat(64), atol=1e-4, rtol=0)
