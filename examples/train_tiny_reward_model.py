"""Train the shipped ``tiny-sum-rm`` reward model: a byte-level GPT-2 scalar head that prefers correct sums.

    python examples/train_tiny_reward_model.py                      # full run, writes pytest_reward/jax/models/tiny-sum-rm
    python examples/train_tiny_reward_model.py --smoke --out /tmp/rm   # a few steps, to check the script works

Model: a Hugging Face ``GPT2ForSequenceClassification`` (one label): the shipped ``tiny-adder``'s 4 layers (it
already computes sums), 2 new layers on top, and a head ``score.weight`` (1, d_model), no bias, that starts at zero.
The score of a conversation is the head applied to the final-normed hidden state of its last token that is not the
pad token (Hugging Face's pooling rule; the pad token is ``<|endoftext|>``, which only ever stands in front).

Texts: a conversation ``[{"role": "user", "content": "12+345="}, {"role": "assistant", "content": "357"}]`` is
rendered in ChatML, the engine's chat rendering for a byte tokenizer (``render_chatml``, generation prompt off)::

    <|endoftext|><|im_start|>user\\n12+345=<|im_end|>\\n<|im_start|>assistant\\n357<|im_end|>\\n

``<|im_start|>`` and ``<|im_end|>`` are special tokens of the model's byte tokenizer (ids 257 and 258, new rows of
the embedding, so the longest problem is 34 tokens and fits tiny-adder's 64 positions), ``<|endoftext|>`` in front is
the start token (``"add_bos_token": true``), and ``tokenizer_config.json`` carries the same ChatML as a Jinja
``chat_template``, so transformers' ``apply_chat_template`` renders the same text.

Training, in three steps (a reward head on tiny-adder alone does not learn to compare: a causal model predicts
the *next* digit, so whether a written digit is right is known only one position earlier, where the digit itself
is not yet seen; step 2 moves that knowledge to the digit's own position):

1. tiny-adder fine-tuned as a language model on correct sums written as ChatML conversations (``--lm-steps``),
   after its position embeddings are moved to where the ChatML text puts the problem and the answer
   (:func:`moved_positions`);
2. the same layers taught to say, at each character of an answer, correct or not, which digit belongs in that
   column (``--cd-steps``, :func:`current_digit_trunk`);
3. the new layers and the head (the 4 trunk layers frozen) trained with the Bradley-Terry loss
   ``-log sigmoid(r_chosen - r_rejected)`` plus ``--aux-weight`` times a logistic loss of the head at every
   character of the answer on whether the answer so far is right (:func:`verdicts`), on pairs of one problem: the
   correct sum (chosen) against a near miss (rejected), its kind drawn uniformly among those that apply:

* ``off_by_one``: the sum plus or minus one;
* ``digit_swap``: two adjacent different digits of the sum swapped;
* ``carry_dropped``: one carry of the addition not propagated (``58+66`` -> ``114`` or ``24``);
* ``digit_changed``: one digit of the sum replaced by another (no leading zero).

Held-out pairs: tiny-adder's own held-out problems (``heldout.jsonl`` next to it, never seen by the trunk in either
operand order), each with one near miss drawn with its own seed, written to this model's ``heldout.jsonl``
(``{"prompt", "chosen", "rejected", "kind"}``); the training sampler rejects those problems in either order. The
pair accuracy (the share of held-out pairs whose chosen response scores strictly higher), overall and per kind, is
recorded in the model card with its Wilson 95% interval.

After training, the scores' zero is calibrated (:func:`calibrate`): a score above 0 means "correct".

Everything is seeded (numpy for data and the new embedding rows, a fixed optimiser schedule): a rerun on the same
machine gives the same weights. ``--stage1-cache FILE`` keeps step 1's trunk for reruns of the later steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pytest_reward.jax import (
    ByteTokenizer,
    load_checkpoint,
    model,
    render_chatml,
    resolve_model,
    save_checkpoint,
)

MODELS = Path(__file__).resolve().parents[1] / "pytest_reward" / "jax" / "models"
DEFAULT_OUT = MODELS / "tiny-sum-rm"
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PAD = 256  # <|endoftext|>: the start token, and the pad token
SEQ = 36  # the longest text, "999+999=" answered "1998", is 34 tokens
KINDS = ("off_by_one", "digit_swap", "carry_dropped", "digit_changed")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TOKENIZER = ByteTokenizer(SPECIALS, add_bos_token=True)


# --- data ------------------------------------------------------------------------------------------------------


def sample_operands(rng: np.random.Generator, n: int, max_digits: int = 3) -> np.ndarray:
    """(n, 2) operands: a digit count uniform in 1..max_digits, then a value with that many digits (tiny-adder's
    training distribution)."""
    digits = rng.integers(1, max_digits + 1, size=(n, 2))
    low = np.where(digits == 1, 0, 10 ** (digits - 1))
    return rng.integers(low, 10**digits)


def carries(a: int, b: int) -> list[int]:
    """The digit positions k (0 = units) whose column sum carries into position k + 1."""
    out, carry, k = [], 0, 0
    while a or b or carry:
        column = a % 10 + b % 10 + carry
        carry = column // 10
        if carry:
            out.append(k)
        a, b, k = a // 10, b // 10, k + 1
    return out


def near_misses(a: int, b: int) -> dict[str, list[int]]:
    """Every wrong sum of each kind (module docstring) for ``a + b``; a kind that does not apply has none."""
    s = a + b
    digits = str(s)
    swaps = []
    for i in range(len(digits) - 1):
        if digits[i] != digits[i + 1] and not (i == 0 and digits[1] == "0"):
            swapped = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2 :]
            swaps.append(int(swapped))
    changed = [
        int(digits[:i] + d + digits[i + 1 :])
        for i in range(len(digits))
        for d in "0123456789"
        if d != digits[i] and not (i == 0 and d == "0" and len(digits) > 1)
    ]
    misses = {
        "off_by_one": [s + 1] + ([s - 1] if s > 0 else []),
        "digit_swap": swaps,
        "carry_dropped": [s - 10 ** (k + 1) for k in carries(a, b)],
        "digit_changed": changed,
    }
    return {kind: [w for w in wrong if w != s and w >= 0] for kind, wrong in misses.items()}


def draw_miss(rng: np.random.Generator, a: int, b: int) -> tuple[str, int]:
    """A near miss of ``a + b``: a kind uniform among those that apply, then one of its wrong sums uniformly."""
    misses = {kind: wrong for kind, wrong in near_misses(a, b).items() if wrong}
    kinds = sorted(misses, key=KINDS.index)
    kind = kinds[int(rng.integers(len(kinds)))]
    wrong = misses[kind]
    return kind, wrong[int(rng.integers(len(wrong)))]


def conversation(prompt: str, response: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def encode(prompt: str, response: str) -> list[int]:
    """The ids the model reads for one response: the start token, then the ChatML text (module docstring)."""
    return [
        PAD,
        *TOKENIZER.encode(render_chatml(conversation(prompt, response), add_generation_prompt=False)),
    ]


def batch_ids(texts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded tokens (B, SEQ) int32 and the pooled position of each row (B,): Hugging Face's rule, the
    rightmost token that is not the pad token."""
    tokens = np.full((len(texts), SEQ), PAD, np.int32)
    for i, ids in enumerate(texts):
        tokens[i, : len(ids)] = ids
    positions = np.arange(SEQ)[None, :] * (tokens != PAD)
    return tokens, positions.argmax(-1).astype(np.int32)


def pair_batch(pairs: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, wrong) triples -> tokens (2B, SEQ), chosen rows first, then the rejected ones, their pooled positions
    (2B,), and the per-position labels (2B, SEQ) and mask (2B, SEQ) of the auxiliary loss (:func:`verdicts`)."""
    rows = [(a, b, a + b) for a, b, _ in pairs] + [(a, b, w) for a, b, w in pairs]
    texts = [encode(f"{a}+{b}=", str(answer)) for a, b, answer in rows]
    tokens, pooled = batch_ids(texts)
    labels, mask = np.zeros(tokens.shape, np.float32), np.zeros(tokens.shape, np.float32)
    for i, ((a, b, answer), ids) in enumerate(zip(rows, texts, strict=True)):
        labels[i, : len(ids)], mask[i, : len(ids)] = verdicts(str(a + b), str(answer), len(ids))
    return tokens, pooled, labels, mask


def verdicts(right: str, answer: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The auxiliary targets of one text of ``n`` tokens: at each answer digit, whether the answer so far agrees
    with the correct sum's digits so far; at the ``<|im_end|>`` and newline after it (the pooled token), whether the
    whole answer is right. Elsewhere masked out."""
    labels, mask = np.zeros(n, np.float32), np.zeros(n, np.float32)
    first = n - len(answer) - 2
    for k in range(len(answer)):
        labels[first + k] = float(answer[: k + 1] == right[: k + 1])
    labels[n - 2 :] = float(answer == right)
    mask[first:] = 1.0
    return labels, mask


# --- the model -------------------------------------------------------------------------------------------------


def all_scores(params: dict, cfg, tokens: jax.Array) -> jax.Array:
    """tokens (B, T) -> (B, T) float32: the head at every position (a prefix's score, as causal attention makes
    it: the score the model gives the text cut after that token)."""
    x, _ = model.hidden_states(params["trunk"], cfg, tokens)  # (B, T, D); right padding is causal-safe
    h = model.final_norm(params["trunk"], cfg, x)  # (B, T, D)
    return (h @ params["score"].T)[..., 0].astype(jnp.float32)


def scores(params: dict, cfg, tokens: jax.Array, pooled: jax.Array) -> jax.Array:
    """tokens (B, T), pooled (B,) -> (B,) float32: GPT2ForSequenceClassification's forward at the pooled token."""
    return all_scores(params, cfg, tokens)[jnp.arange(tokens.shape[0]), pooled]


def score_texts(params: dict, cfg, texts: list[list[int]], batch: int = 512) -> np.ndarray:
    fn = jax.jit(lambda p, t, i: scores(p, cfg, t, i))
    out = []
    for start in range(0, len(texts), batch):
        tokens, pooled = batch_ids(texts[start : start + batch])
        out.append(np.asarray(fn(params, tokens, pooled)))
    return np.concatenate(out)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (95% by default)."""
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def heldout_pairs(seed: int, limit: int | None) -> list[dict[str, str]]:
    """tiny-adder's held-out problems, each with one near miss drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    rows = []
    lines = (resolve_model("tiny-adder") / "heldout.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines[:limit]:
        problem = json.loads(line)["prompt"]
        a, b = (int(x) for x in problem.rstrip("=").split("+"))
        kind, wrong = draw_miss(rng, a, b)
        rows.append({"prompt": problem, "chosen": str(a + b), "rejected": str(wrong), "kind": kind})
    return rows


def pair_accuracy(params: dict, cfg, rows: list[dict[str, str]]) -> dict[str, object]:
    chosen = score_texts(params, cfg, [encode(r["prompt"], r["chosen"]) for r in rows])
    rejected = score_texts(params, cfg, [encode(r["prompt"], r["rejected"]) for r in rows])
    wins = chosen > rejected
    out: dict[str, object] = {}
    for kind in ("all", *KINDS):
        mask = np.array([kind in ("all", r["kind"]) for r in rows])
        k, n = int(wins[mask].sum()), int(mask.sum())
        if n:
            low, high = wilson(k, n)
            out[kind] = {
                "correct": k,
                "pairs": n,
                "accuracy": round(k / n, 4),
                "wilson95": [round(low, 4), round(high, 4)],
            }
    calls = int((chosen > 0).sum() + (rejected <= 0).sum())
    low, high = wilson(calls, 2 * len(rows))
    out["answers_called_right"] = {
        "correct": calls, "answers": 2 * len(rows), "accuracy": round(calls / (2 * len(rows)), 4),
        "wilson95": [round(low, 4), round(high, 4)],
    }  # fmt: skip
    out["mean_margin"] = round(float(np.mean(chosen - rejected)), 3)
    out["mean_chosen"] = round(float(np.mean(chosen)), 3)
    out["mean_rejected"] = round(float(np.mean(rejected)), 3)
    return out


# --- training --------------------------------------------------------------------------------------------------


def draw_pairs(
    rng: np.random.Generator, n: int, forbidden: set[tuple[int, int]]
) -> list[tuple[int, int, int]]:
    """``n`` training problems (never a forbidden one) as ``(a, b, near miss)`` triples."""
    pairs: list[tuple[int, int, int]] = []
    while len(pairs) < n:
        for a, b in sample_operands(rng, n).tolist():
            if (a, b) not in forbidden and len(pairs) < n:
                pairs.append((a, b, draw_miss(rng, a, b)[1]))
    return pairs


def optimiser(lr: float, steps: int) -> optax.GradientTransformation:
    warmup = max(1, min(30, steps // 10))
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1), lr / 20)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98, weight_decay=0.0))


def moved_positions(pos_embed: np.ndarray) -> np.ndarray:
    """tiny-adder's position embeddings (T_max, D), moved to where the ChatML text puts what it learned them for.

    tiny-adder read the problem at positions 1-8 and wrote the answer at 5-13, and never saw a position past 15
    (those rows are still their random initialisation). In the ChatML text the problem starts at 7 (after the start
    token, ``<|im_start|>`` and ``user\n``) and the answer 19 positions later than tiny-adder wrote it (after
    ``<|im_end|>\n<|im_start|>assistant\n``): rows 7-14 start as tiny-adder's 1-8 and rows 24-33 as its 5-14, so
    its addition works from the first step and stage 1 only has to learn to read past the markup."""
    moved = pos_embed.copy()
    moved[7:15] = pos_embed[1:9]
    moved[24:34] = pos_embed[5:15]
    return moved


def adapted_trunk(args: argparse.Namespace, forbidden: set[tuple[int, int]]) -> tuple[object, dict]:
    """Stage 1: tiny-adder, with two new embedding rows (the ChatML tokens), fine-tuned as a language model on
    correct sums written as ChatML conversations, so that its addition works in the reward model's texts (it was
    trained on ``<|endoftext|>12+345=357<|endoftext|>``). Loss on every token after the start token, the answer's
    weighted ``--answer-weight`` times the rest, as tiny-adder was trained."""
    cfg, trunk = load_checkpoint(resolve_model("tiny-adder"))
    rng = np.random.default_rng(args.seed)
    extra = rng.normal(0.0, 0.02, size=(len(SPECIALS) - 1, cfg.d_model)).astype(np.float32)
    trunk["embed"] = np.concatenate([trunk["embed"], extra])
    trunk["pos_embed"] = moved_positions(trunk["pos_embed"])
    cfg = dataclasses.replace(cfg, vocab_size=TOKENIZER.vocab_size)
    tx = optimiser(args.lm_lr, args.lm_steps)
    opt_state = tx.init(trunk)

    def loss_fn(trunk, tokens, weights):
        logp = jax.nn.log_softmax(model.forward(trunk, cfg, tokens[:, :-1]), axis=-1)  # (B, T-1, V)
        nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
        return jnp.sum(nll * weights) / jnp.sum(weights)

    @jax.jit
    def step(trunk, opt_state, tokens, weights):
        loss, grads = jax.value_and_grad(loss_fn)(trunk, tokens, weights)
        updates, opt_state = tx.update(grads, opt_state, trunk)
        return optax.apply_updates(trunk, updates), opt_state, loss

    t0 = time.perf_counter()
    for i in range(1, args.lm_steps + 1):
        pairs = draw_pairs(rng, args.batch_size * 2, forbidden)
        texts = [encode(f"{a}+{b}=", str(a + b)) for a, b, _ in pairs]
        tokens, _ = batch_ids(texts)
        weights = np.zeros((len(texts), SEQ - 1), np.float32)
        for row, (ids, (a, b, _)) in enumerate(zip(texts, pairs, strict=True)):
            answer = len(ids) - len(f"{a + b}") - 2  # the answer's digits, then <|im_end|> and the newline
            weights[row, : len(ids) - 1] = 1.0
            weights[row, answer - 1 : answer - 1 + len(f"{a + b}") + 1] = args.answer_weight
        trunk, opt_state, loss = step(trunk, opt_state, tokens, weights)
        if i % args.log_every == 0 or i == args.lm_steps:
            print(f"lm step {i:5d}  loss {float(loss):.4f}  {time.perf_counter() - t0:6.1f}s", flush=True)
    trunk = jax.device_get(trunk)
    args.lm_accuracy = answer_accuracy(cfg, trunk, forbidden)
    print(f"lm teacher-forced answer accuracy {args.lm_accuracy:.3f}", flush=True)
    return cfg, trunk


def digit_targets(pairs: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stage 1b's batch: a correct and a near-miss answer per problem -> tokens (2B, SEQ), targets (2B, SEQ) and
    weights (2B, SEQ). At the newline before the answer the target is the sum's first digit (what tiny-adder
    predicts there); at the answer's k-th character it is the sum's k-th digit (``<|im_end|>`` past its end)."""
    rows = [(a, b, a + b) for a, b, _ in pairs] + [(a, b, w) for a, b, w in pairs]
    texts = [encode(f"{a}+{b}=", str(answer)) for a, b, answer in rows]
    tokens, _ = batch_ids(texts)
    targets = np.zeros(tokens.shape, np.int32)
    weights = np.zeros(tokens.shape, np.float32)
    end = TOKENIZER.encode("<|im_end|>")[0]
    for i, ((a, b, answer), ids) in enumerate(zip(rows, texts, strict=True)):
        right = TOKENIZER.encode(str(a + b))
        first = len(ids) - len(str(answer)) - 2
        targets[i, first - 1], weights[i, first - 1] = right[0], 1.0
        for k in range(len(str(answer))):
            targets[i, first + k] = right[k] if k < len(right) else end
            weights[i, first + k] = 1.0
    return tokens, targets, weights


def current_digit_trunk(args: argparse.Namespace, cfg, trunk: dict, forbidden: set[tuple[int, int]]) -> dict:
    """Stage 1b: the adapted trunk taught to say, at each character of an answer, which digit belongs there (the
    sum's digit of that column), on correct answers and near misses alike: the written digit can no longer be
    copied, so the column's digit is computed at its own position. A wrong digit then differs from the digit the
    trunk computes at the same position, which the new layers of stage 2 can see without looking elsewhere."""
    rng = np.random.default_rng(args.seed + 4)
    tx = optimiser(args.lm_lr, args.cd_steps)
    opt_state = tx.init(trunk)

    def loss_fn(trunk, tokens, targets, weights):
        logp = jax.nn.log_softmax(model.forward(trunk, cfg, tokens), axis=-1)  # (B, T, V)
        nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
        return jnp.sum(nll * weights) / jnp.sum(weights)

    @jax.jit
    def step(trunk, opt_state, tokens, targets, weights):
        loss, grads = jax.value_and_grad(loss_fn)(trunk, tokens, targets, weights)
        updates, opt_state = tx.update(grads, opt_state, trunk)
        return optax.apply_updates(trunk, updates), opt_state, loss

    t0 = time.perf_counter()
    for i in range(1, args.cd_steps + 1):
        trunk, opt_state, loss = step(
            trunk, opt_state, *digit_targets(draw_pairs(rng, args.batch_size, forbidden))
        )
        if i % args.log_every == 0 or i == args.cd_steps:
            print(f"digit step {i:5d}  loss {float(loss):.4f}  {time.perf_counter() - t0:6.1f}s", flush=True)
    trunk = jax.device_get(trunk)
    tokens, targets, weights = digit_targets(draw_pairs(np.random.default_rng(args.seed + 5), 256, set()))
    predicted = np.asarray(jax.jit(lambda p, t: jnp.argmax(model.forward(p, cfg, t), -1))(trunk, tokens))
    rows_right = np.all((predicted == targets) | (weights == 0), axis=1).mean()
    args.digit_accuracy = float(rows_right)
    print(f"digit accuracy (every answer position right, fresh problems) {rows_right:.3f}", flush=True)
    return trunk


def answer_accuracy(cfg, trunk: dict, problems: set[tuple[int, int]]) -> float:
    """The share of ``problems`` (held-out ones) whose every answer token and the ``<|im_end|>`` after it is the
    adapted language model's argmax given the true text before it."""
    pairs = sorted(problems)[:512]
    texts = [encode(f"{a}+{b}=", str(a + b)) for a, b in pairs]
    tokens, _ = batch_ids(texts)
    predicted = np.asarray(jax.jit(lambda p, t: jnp.argmax(model.forward(p, cfg, t), -1))(trunk, tokens))
    right = 0
    for row, (ids, (a, b)) in enumerate(zip(texts, pairs, strict=True)):
        first = len(ids) - len(str(a + b)) - 2
        right += bool(
            np.all(predicted[row, first - 1 : len(ids) - 2] == np.asarray(ids[first : len(ids) - 1]))
        )
    return right / len(pairs)


def calibrate(params: dict, cfg, pairs: list[tuple[int, int, int]]) -> float:
    """Move the scores so that 0 separates correct answers from near misses; returns the shift.

    The Bradley-Terry loss fixes differences only, so the scale's zero is arbitrary. On ``pairs`` (fresh training
    problems, never held-out ones) the threshold that classifies the most answers correctly (correct sum above,
    near miss below; the midpoint between two neighbouring scores) is found, and the final norm's bias moved along
    the head so that every score drops by it: the head reads only ``w @ (scale * x_hat + bias)``, so adding
    ``t * w / |w|^2`` to the bias shifts every score by exactly ``t``. Scores above 0 are then the model's "correct"."""
    right = score_texts(params, cfg, [encode(f"{a}+{b}=", str(a + b)) for a, b, _ in pairs])
    wrong = score_texts(params, cfg, [encode(f"{a}+{b}=", str(w)) for a, b, w in pairs])
    values = np.concatenate([right, wrong])
    labels = np.concatenate([np.ones_like(right), np.zeros_like(wrong)])[np.argsort(values)]
    values = np.sort(values)
    # cut after index k: below are called wrong, above correct; correct calls = wrong ones below + right ones above
    calls = np.cumsum(1 - labels) + (labels.sum() - np.cumsum(labels))
    k = int(np.argmax(calls[:-1]))
    threshold = float((values[k] + values[k + 1]) / 2)
    w = np.asarray(params["score"][0], np.float64)
    bias = params["trunk"]["final_norm"]["bias"]
    params["trunk"]["final_norm"]["bias"] = (bias - threshold * w / float(w @ w)).astype(bias.dtype)
    return threshold


def cached_trunk(cache: Path) -> tuple[object, dict]:
    """Stage 1's trunk as ``--stage1-cache`` keeps it (the leaves of the tree, in tree order)."""
    cfg, trunk = load_checkpoint(resolve_model("tiny-adder"))
    cfg = dataclasses.replace(cfg, vocab_size=TOKENIZER.vocab_size)
    tree = jax.tree_util.tree_structure(trunk)
    with np.load(cache) as data:
        leaves = [data[f"arr_{i}"] for i in range(len(data.files))]
    return cfg, jax.tree_util.tree_unflatten(tree, leaves)


def initial_params(args: argparse.Namespace, forbidden: set[tuple[int, int]]) -> tuple[object, dict]:
    """Stage 2's start: the adapted trunk, ``--extra-layers`` new layers on top whose output projections start at
    zero (so they start as the identity: the trunk's states reach the head unchanged), and a zero head. The new
    layers give the model room to compare the answer it reads with the sum the trunk computes."""
    cache = args.stage1_cache
    if cache is not None and cache.exists():
        cfg, trunk = cached_trunk(cache)
        args.lm_accuracy = answer_accuracy(cfg, trunk, forbidden)
    else:
        cfg, trunk = adapted_trunk(args, forbidden)
        if cache is not None:
            np.savez(cache, *jax.tree_util.tree_leaves(trunk))
    trunk = current_digit_trunk(args, cfg, trunk, forbidden)
    deeper = dataclasses.replace(cfg, n_layers=cfg.n_layers + args.extra_layers)
    fresh = model.init_params(deeper, seed=args.seed)["layers"][cfg.n_layers :]
    trunk["layers"] = [*trunk["layers"], *fresh]
    return deeper, {"trunk": trunk, "score": np.zeros((1, cfg.d_model), np.float32)}


def train(args: argparse.Namespace) -> dict[str, object]:
    held = heldout_pairs(args.seed + 1, args.heldout)
    forbidden = set()
    for r in held:
        a, b = (int(x) for x in r["prompt"].rstrip("=").split("+"))
        forbidden |= {(a, b), (b, a)}
    t_start = time.perf_counter()
    cfg, params = initial_params(args, forbidden)
    tx = optimiser(args.lr, args.steps)
    opt_state = tx.init(params)

    frozen = cfg.n_layers - args.extra_layers

    def loss_fn(params, tokens, pooled, labels, mask):
        # stage 1's trunk stays as it is (no gradient reaches it, so Adam never moves it): its sums are right 96% of
        # the time; the new layers learn to compare the answer with them, and the head to read the comparison
        trunk = dict(params["trunk"])
        for key in ("embed", "pos_embed"):
            trunk[key] = jax.lax.stop_gradient(trunk[key])
        trunk["layers"] = [jax.lax.stop_gradient(x) for x in trunk["layers"][:frozen]] + trunk["layers"][
            frozen:
        ]
        every = all_scores({**params, "trunk": trunk}, cfg, tokens)  # (2B, T)
        r = every[jnp.arange(tokens.shape[0]), pooled]  # (2B,)
        n = r.shape[0] // 2
        margin = r[:n] - r[n:]
        bt = -jnp.mean(jax.nn.log_sigmoid(margin))
        bce = -(labels * jax.nn.log_sigmoid(every) + (1 - labels) * jax.nn.log_sigmoid(-every))
        aux = jnp.sum(bce * mask) / jnp.sum(mask)
        return bt + args.aux_weight * aux, jnp.mean(margin > 0)

    @jax.jit
    def step(params, opt_state, tokens, pooled, labels, mask):
        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, tokens, pooled, labels, mask)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, acc

    rng = np.random.default_rng(args.seed + 2)
    t0 = time.perf_counter()
    losses: list[float] = []
    for i in range(1, args.steps + 1):
        pairs = draw_pairs(rng, args.batch_size, forbidden)
        params, opt_state, loss, acc = step(params, opt_state, *pair_batch(pairs))
        if i % args.log_every == 0 or i == args.steps:
            losses.append(float(loss))
            print(f"step {i:5d}  loss {float(loss):.4f}  batch pair accuracy {float(acc):.3f}  "
                  f"{time.perf_counter() - t0:6.1f}s", flush=True)  # fmt: skip
    train_seconds = time.perf_counter() - t_start
    params = jax.device_get(params)
    shift = calibrate(params, cfg, draw_pairs(np.random.default_rng(args.seed + 3), 2048, forbidden))

    out = Path(args.out)
    save(out, cfg, params)
    with (out / "heldout.jsonl").open("w", encoding="utf-8") as f:
        for row in held:
            f.write(json.dumps(row) + "\n")
    report = {
        "command": " ".join(["python examples/train_tiny_reward_model.py", *args.argv]),
        "steps": args.steps,
        "lm_steps": args.lm_steps,
        "lm_accuracy": args.lm_accuracy,
        "cd_steps": args.cd_steps,
        "digit_accuracy": args.digit_accuracy,
        "extra_layers": args.extra_layers,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "aux_weight": args.aux_weight,
        "train_seconds": round(train_seconds, 1),
        "final_loss": losses[-1] if losses else math.nan,
        "heldout": pair_accuracy(params, cfg, held),
        "calibration_shift": round(shift, 4),
        "params": cfg.n_params + cfg.d_model,
        "seed": args.seed,
        "jax": jax.__version__,
    }
    (out / "README.md").write_text(model_card(cfg, report), encoding="utf-8")
    print(json.dumps(report, indent=2))
    return report


def save(out: Path, cfg, params: dict) -> None:
    """A Hugging Face ``GPT2ForSequenceClassification`` directory: the trunk as the engine writes it, the head
    ``score.weight`` added, and the byte tokenizer with its ChatML template."""
    from safetensors.numpy import load_file, save_file

    extra = {
        "architectures": ["GPT2ForSequenceClassification"],
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
        "num_labels": 1,
    }
    save_checkpoint(out, cfg, params["trunk"], extra_config=extra)
    weights = out / "model.safetensors"
    tensors = load_file(str(weights))
    tensors["score.weight"] = np.asarray(params["score"], np.float32)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    TOKENIZER.save(out, model_max_length=cfg.max_positions)
    config_file = out / "tokenizer_config.json"
    tc = json.loads(config_file.read_text(encoding="utf-8"))
    tc["chat_template"] = CHAT_TEMPLATE
    config_file.write_text(json.dumps(tc, indent=2) + "\n", encoding="utf-8")


def model_card(cfg, report: dict) -> str:
    held = report["heldout"]
    rows = "\n".join(
        f"| {kind} | {held[kind]['pairs']} | **{held[kind]['accuracy']:.3f}** | "
        f"[{held[kind]['wilson95'][0]:.3f}, {held[kind]['wilson95'][1]:.3f}] |"
        for kind in ("all", *KINDS)
        if kind in held
    )
    called = held["answers_called_right"]
    return f"""# tiny-sum-rm

A byte-level reward model: a Hugging Face `GPT2ForSequenceClassification` ({cfg.n_layers} layers, d_model
{cfg.d_model}, {cfg.n_heads} heads, {report["params"]:,} parameters, context {cfg.max_positions}, one label) that
scores an answer to an addition of 1-3 digit numbers, and scores the correct sum above a near miss.

Tokens are UTF-8 bytes (0-255) plus `<|endoftext|>` (256: the start token in front of every text, and the pad
token), `<|im_start|>` (257) and `<|im_end|>` (258). A conversation is read as ChatML (the `chat_template` of
`tokenizer_config.json`, and the engine's rendering for a byte tokenizer), after the start token:

    <|endoftext|><|im_start|>user\\n12+345=<|im_end|>\\n<|im_start|>assistant\\n357<|im_end|>\\n

The score is the head `score.weight` (1, {cfg.d_model}), no bias, on the final hidden state of the last token that
is not the pad token (Hugging Face's pooling rule, the engine's default `pooling="hf"`). Scores are unbounded logits
whose differences are what the training fixed (the Bradley-Terry model: `P(a preferred to b) = sigmoid(r_a - r_b)`);
their zero was then calibrated: a score above 0 is the model's "this sum is correct" (below).

Trained by `{report["command"]}` (deterministic: fixed seeds) in {report["train_seconds"]} s on CPU (jax
{report["jax"]}), in three steps:

1. the shipped `tiny-adder` (4 layers), with two new embedding rows for the ChatML tokens and its position
   embeddings moved to where the ChatML text puts the problem and the answer, fine-tuned for {report["lm_steps"]}
   steps as a language model on correct sums written as ChatML conversations (its next digit is then right for
   {report["lm_accuracy"]:.3f} of held-out answers, every digit);
2. the same 4 layers taught for {report["cd_steps"]} steps to say, at each character of an answer (correct or a
   near miss), which digit belongs in that column, so that a wrong digit differs from the digit computed at its own
   position (every position right on {report["digit_accuracy"]:.3f} of fresh answers);
3. {report["extra_layers"]} new layers on top and the head (starting at zero) trained for {report["steps"]} steps
   of {report["batch_size"]} pairs (learning rate {report["lr"]:g}; the 4 trunk layers frozen) with the
   Bradley-Terry loss `-log sigmoid(r_chosen - r_rejected)`, the correct sum against a near miss (off by one, two
   adjacent digits swapped, a carry dropped, or one digit changed; the kind uniform among those that apply), plus
   (weight {report["aux_weight"]:g}) a logistic loss of the head at every character of the answer on whether the
   answer so far is right. Final training loss {report["final_loss"]:.4f}.

Calibration: on 2048 fresh training problems (one correct answer and one near miss each), the threshold that calls
the most answers right was {report["calibration_shift"]}; the final norm's bias was moved along the head so that
every score drops by it (a shift of all scores: pair accuracies do not change).

Held-out pairs (`heldout.jsonl`): tiny-adder's {held["all"]["pairs"]} held-out problems (never trained on by
tiny-adder nor here, in either operand order), each with one near miss. Pair accuracy = the share of pairs whose
correct sum scores strictly higher; every interval is the Wilson score interval at 95%:

| rejected kind | pairs | pair accuracy | Wilson 95% |
| --- | ---: | ---: | --- |
{rows}

Answers called right (correct sums above 0, near misses at or below): **{called["accuracy"]:.3f}** of
{called["answers"]} [{called["wilson95"][0]:.3f}, {called["wilson95"][1]:.3f}]. Mean score of the correct sums
{held["mean_chosen"]}, of the near misses {held["mean_rejected"]} (mean margin {held["mean_margin"]}).

Load it with `RewardModel.from_checkpoint(resolve_model("tiny-sum-rm"))` (`pytest_reward.jax`), use it as a reward
function with `reward_model("tiny-sum-rm")` (`pytest_reward`), or with transformers:
`AutoModelForSequenceClassification.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`.
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--lm-steps", type=int, default=300, help="stage 1: language-model steps on ChatML sums")
    p.add_argument("--lm-lr", type=float, default=1e-3)
    p.add_argument(
        "--answer-weight", type=float, default=8.0, help="stage 1: loss weight of the answer's tokens"
    )
    p.add_argument("--cd-steps", type=int, default=400, help="stage 1b: steps of the column-digit objective")
    p.add_argument("--extra-layers", type=int, default=2, help="new layers on top of tiny-adder's trunk")
    p.add_argument("--steps", type=int, default=1500, help="stage 2: reward-model steps (Bradley-Terry)")
    p.add_argument(
        "--aux-weight", type=float, default=1.0, help="stage 2: weight of the per-position auxiliary loss"
    )
    p.add_argument("--stage1-cache", type=Path, help="reuse (or write) stage 1's trunk here (.npz)")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="model directory to write (default: %(default)s)"
    )
    p.add_argument(
        "--smoke", action="store_true", help="a few steps on a small held-out set (checks the script)"
    )
    p.add_argument("--batch-size", type=int, default=64, help="pairs per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--heldout", type=int, default=None, help="held-out pairs (default: all 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=25)
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        if args.out == DEFAULT_OUT:
            p.error("--smoke needs an explicit --out (it must not overwrite the shipped model)")
        args.steps, args.lm_steps, args.cd_steps, args.heldout, args.batch_size, args.log_every = (
            5,
            5,
            5,
            64,
            16,
            1,
        )
    report = train(args)
    accuracy = report["heldout"]["all"]["accuracy"]  # type: ignore[index]
    return 0 if args.smoke or accuracy >= 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
