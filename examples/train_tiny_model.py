"""Train the shipped ``tiny-adder`` model: a byte-level GPT-2 that adds numbers of up to three digits.

    python examples/train_tiny_model.py                     # full run, writes pytest_reward/jax/models/tiny-adder
    python examples/train_tiny_model.py --smoke --out /tmp/adder   # a few steps, to check the script works

Task: every problem is one document in GPT-2's convention, ``<|endoftext|>12+345=357<|endoftext|>``: the model
reads the end-of-text token in front of the text (its start token, declared in the saved tokenizer as
``"add_bos_token": true``), then the problem, then ends the answer with the end-of-text token. The loss counts every
token after the start token (operands, ``+``, ``=``, the answer and the closing end-of-text), so the model is a
language model of the whole problem text: the inference job scores texts and generates from prompts under exactly
this convention (``InferenceJob.start_token``), and teacher-forced scoring, perplexity and greedy rollouts agree.
The answer's tokens (and its end-of-text) weigh ``--answer-weight`` times the others in the loss: the operands are
random digits whose loss cannot go below their entropy, and at equal weight their gradient drowns the answer's
(at equal weight the validation accuracy was 0.72 after 2500 of 3000 steps; the previous recipe, answer-only
loss, reached 0.94 but left the problem text unmodelled: a perplexity of 3.0e4 per token on held-out problems).
Operands have 1-3 digits (digit count uniform, then the value uniform), so small and large numbers are both
common.

Held-out set: ``--heldout`` problems are drawn first with their own seed and written to ``heldout.jsonl`` (one
``{"prompt": ..., "answer": ...}`` per line); the training sampler rejects them in either operand order, so no
held-out problem (nor its commuted twin) is ever trained on. At the end the script decodes the whole held-out
set greedily with :class:`pytest_reward.jax.InferenceJob` and records the accuracy in the model card, with the
teacher-forced answer accuracy (the argmax at each answer position given the true problem before it) and the
perplexity of the held-out problems as text.

Everything is seeded (numpy for data, jax for init, a fixed optimiser schedule), so a rerun on the same machine
gives the same weights.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pytest_reward.jax import ByteTokenizer, InferenceJob, ModelConfig, init_params, model

EOT = 256  # <|endoftext|>: the start token in front of every problem, and the end of its answer
SEQ = 16  # predictions per row: EOT "999+999=1998" EOT is 14 tokens, 13 predictions
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "pytest_reward" / "jax" / "models" / "tiny-adder"


def sample_operands(rng: np.random.Generator, n: int, max_digits: int) -> np.ndarray:
    """(n, 2) int64 operands: a digit count uniform in 1..max_digits, then a value with that many digits."""
    digits = rng.integers(1, max_digits + 1, size=(n, 2))
    low = np.where(digits == 1, 0, 10 ** (digits - 1))
    return rng.integers(low, 10**digits)


def heldout_problems(seed: int, n: int, max_digits: int) -> np.ndarray:
    """``n`` distinct held-out operand pairs (n, 2), in draw order."""
    rng = np.random.default_rng(seed)
    seen: dict[tuple[int, int], None] = {}
    while len(seen) < n:
        for a, b in sample_operands(rng, n, max_digits).tolist():
            if len(seen) < n:
                seen.setdefault((a, b), None)
    return np.array(list(seen), dtype=np.int64)


def encode_batch(pairs: np.ndarray, answer_weight: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Operand pairs -> inputs (B, SEQ) int32, targets (B, SEQ) int32, loss weights (B, SEQ) float32.

    Row ``EOT a+b=sum EOT``, right-padded with EOT; weights select every prediction up to the closing EOT: 1 for
    the problem's tokens, ``answer_weight`` for the answer's and its closing EOT.
    """
    B = len(pairs)
    tokens = np.full((B, SEQ + 1), EOT, np.int32)
    weights = np.zeros((B, SEQ), np.float32)
    for i, (a, b) in enumerate(pairs.tolist()):
        problem, answer = f"{a}+{b}=".encode(), f"{a + b}".encode()
        seq = [EOT, *problem, *answer, EOT]
        tokens[i, : len(seq)] = seq
        weights[i, : len(problem)] = 1.0  # predictions of the problem's tokens, each after the ones before it
        weights[i, len(problem) : len(seq) - 1] = (
            answer_weight  # the answer's digits and the EOT that ends it
        )
    return tokens[:, :-1], tokens[:, 1:], weights


def make_config(d_model: int, n_layers: int, n_heads: int) -> ModelConfig:
    return ModelConfig.gpt2(
        vocab_size=257,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        max_positions=64,
        bos_token_id=EOT,
        eos_token_ids=(EOT,),
        pad_token_id=EOT,
    )


def train(args: argparse.Namespace) -> dict[str, object]:
    cfg = make_config(args.d_model, args.layers, args.heads)
    held = heldout_problems(args.seed + 1, args.heldout, args.max_digits)
    valid = heldout_problems(
        args.seed + 2, 256, args.max_digits
    )  # progress reports only; never selects a model
    never = np.concatenate([held, valid])
    forbidden = {(int(a), int(b)) for a, b in never} | {(int(b), int(a)) for a, b in never}

    params = init_params(cfg, seed=args.seed)
    warmup = max(1, min(200, args.steps // 10))
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, args.lr, warmup, max(args.steps, warmup + 1), args.lr / 20
    )
    decay_mask = jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)
    tx = optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98, weight_decay=0.1, mask=decay_mask)
    )
    opt_state = tx.init(params)

    def loss_fn(params, inputs, targets, weights):
        logits = model.forward(params, cfg, inputs)  # (B, SEQ, V); right padding needs no mask
        logp = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
        return jnp.sum(nll * weights) / jnp.sum(weights)

    @jax.jit
    def step(params, opt_state, inputs, targets, weights):
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets, weights)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    losses: list[float] = []
    for i in range(1, args.steps + 1):
        pairs = sample_operands(rng, args.batch_size * 2, args.max_digits)
        pairs = np.array(
            [p for p in pairs.tolist() if tuple(p) not in forbidden][: args.batch_size], np.int64
        )
        batch = encode_batch(pairs, args.answer_weight)
        params, opt_state, loss = step(params, opt_state, *map(jnp.asarray, batch))
        if i % args.log_every == 0 or i == args.steps:
            losses.append(float(loss))
            print(f"step {i:5d}  loss {float(loss):.4f}  {time.perf_counter() - t0:6.1f}s", flush=True)
        if args.eval_every and i % args.eval_every == 0:
            print(f"step {i:5d}  validation accuracy {accuracy(cfg, params, valid):.3f}", flush=True)
    train_seconds = time.perf_counter() - t0

    out = Path(args.out)
    job = inference_job(cfg, params)
    job.save(out)
    with (out / "heldout.jsonl").open("w", encoding="utf-8") as f:
        for a, b in held.tolist():
            f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")

    report = {
        "command": " ".join(["python examples/train_tiny_model.py", *args.argv]),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "answer_weight": args.answer_weight,
        "train_seconds": round(train_seconds, 1),
        "final_loss": losses[-1] if losses else math.nan,
        "heldout_problems": len(held),
        "heldout_greedy_accuracy": accuracy(cfg, params, held),
        "heldout_teacher_forced_accuracy": teacher_forced_accuracy(cfg, params, held),
        "heldout_perplexity": perplexity(cfg, params, held),
        "params": cfg.n_params,
        "seed": args.seed,
        "jax": jax.__version__,
    }
    (out / "README.md").write_text(model_card(cfg, report), encoding="utf-8")
    print(json.dumps(report, indent=2))
    return report


def inference_job(cfg: ModelConfig, params: model.Params) -> InferenceJob:
    """The model as the inference engine runs it: the tokenizer declares ``<|endoftext|>`` as the start token."""
    tokenizer = ByteTokenizer(add_bos_token=True)
    return InferenceJob.from_params(
        cfg, jax.device_get(params), tokenizer=tokenizer, per_device_batch_size=256
    )


def accuracy(cfg: ModelConfig, params: model.Params, pairs: np.ndarray) -> float:
    """Greedy exact-match accuracy on operand pairs (n, 2), decoded with the inference engine."""
    rollouts = inference_job(cfg, params).rollout([f"{a}+{b}=" for a, b in pairs.tolist()], max_new_tokens=6)
    return sum(r.text == str(a + b) for r, (a, b) in zip(rollouts, pairs.tolist(), strict=True)) / len(pairs)


def teacher_forced_accuracy(cfg: ModelConfig, params: model.Params, pairs: np.ndarray) -> float:
    """Fraction of problems whose every answer digit, and the end-of-text token after them, is the argmax given
    the true text before it (what a greedy rollout must produce to be exactly right)."""
    job = inference_job(cfg, params)
    texts = [(f"{a}+{b}=", f"{a + b}<|endoftext|>") for a, b in pairs.tolist()]
    scored = job.loglikelihood(texts)
    return sum(s.is_greedy for s in scored) / len(pairs)


def perplexity(cfg: ModelConfig, params: model.Params, pairs: np.ndarray) -> float:
    """Mean over problems of the per-token perplexity of ``"a+b=sum"`` (every character scored after the start
    token), as the demo's ``PerplexityEvaluation`` reports it."""
    nll = inference_job(cfg, params).token_nll([f"{a}+{b}={a + b}" for a, b in pairs.tolist()])
    return float(np.mean([math.exp(float(x.mean())) for x in nll]))


def model_card(cfg: ModelConfig, report: dict[str, object]) -> str:
    return f"""# tiny-adder

A byte-level GPT-2 ({cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads, {cfg.n_params:,} parameters,
context {cfg.max_positions}) that completes additions of 1-3 digit numbers: `"12+345="` -> `"357"` then the
end-of-text token (id 256). Tokens are UTF-8 bytes (0-255) plus `<|endoftext|>` (256).

Every problem is read as one GPT-2 style document, `<|endoftext|>12+345=357<|endoftext|>`: the end-of-text
token in front is the model's start token, declared in `tokenizer_config.json` (`"add_bos_token": true`) and in
the `tokenizer.json` post-processor, so `InferenceJob` and transformers' `tokenizer(text)` both put it in front of
every text they score or prompt they generate from. The training loss counts every token after it (the answer's
tokens weigh {report["answer_weight"]}x the problem's).

Trained by `{report["command"]}` (deterministic: fixed seeds) for {report["steps"]} steps of
{report["batch_size"]} problems in {report["train_seconds"]} s on CPU (jax {report["jax"]}). On the
{report["heldout_problems"]} held-out problems of `heldout.jsonl` (never trained on, in either operand order):

* greedy rollout accuracy (the generated answer is exactly the sum): **{report["heldout_greedy_accuracy"]:.3f}**;
* teacher-forced answer accuracy (every answer digit and the closing end-of-text token is the argmax given the true
  text before it): **{report["heldout_teacher_forced_accuracy"]:.3f}**;
* perplexity of the problems as text (`"12+345=357"`: per token, every character scored after the start token,
  averaged over problems): **{report["heldout_perplexity"]:.2f}** (the operands are random digits; the answer is
  nearly certain).

Load it with `InferenceJob.from_checkpoint(resolve_model("tiny-adder"))`, or with transformers:
`AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`.
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="model directory to write (default: %(default)s)"
    )
    p.add_argument(
        "--smoke", action="store_true", help="a few steps on a small held-out set (checks the script)"
    )
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument(
        "--answer-weight", type=float, default=8.0, help="loss weight of the answer's tokens (others: 1)"
    )
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-digits", type=int, default=3)
    p.add_argument("--heldout", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=500, help="validation accuracy every N steps (0: never)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        if args.out == DEFAULT_OUT:
            p.error("--smoke needs an explicit --out (it must not overwrite the shipped model)")
        args.steps, args.heldout, args.batch_size, args.log_every, args.eval_every = (
            min(args.steps, 5),
            32,
            32,
            1,
            5,
        )
    report = train(args)
    return 0 if args.smoke or float(report["heldout_greedy_accuracy"]) >= 0.9 else 1  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
