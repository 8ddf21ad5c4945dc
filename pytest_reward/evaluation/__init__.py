"""Evaluations: small dataset adapters scored through a model job (``pytest_reward.jax.InferenceJob``), and an
:class:`Evaluator` that runs a list of them and saves the results.

Importing this package imports no jax: an evaluation talks to the model only through the job it is handed (the
:class:`~.job.ModelJob` protocol); only the :class:`Evaluator` constructors that build a job import the engine.
``pytest_reward.jax.evaluation`` is an alias of this package, kept for existing code.

The API is theseus's (``Evaluation``, ``RolloutEvaluation``, ``EncodingEvaluation``, ``PerplexityEvaluation``,
``PerplexityComparisonEvaluation``, ``Evaluator``), with its known bugs fixed. An evaluation owns no model and no
compiled program: every model call goes through the job's batched, shape-bucketed API (``generate_tokens``,
``token_nll``, ``loglikelihood``, ``predictions``), one call per evaluation, so the job's executables are shared
by every evaluation and every test.

Modules, one concept each:

* :mod:`.job` - :class:`ModelJob`, what an evaluation uses of the model, and the view of a job with another
  encoding;
* :mod:`.base` - :class:`Evaluation`, :class:`EvaluationSample`, :func:`reduce_scores` and the start every
  built-in evaluation shares;
* :mod:`.rollout` - :class:`RolloutEvaluation` (generation; check, score or a reward function);
* :mod:`.encoding` - :class:`EncodingEvaluation` (next-token prediction);
* :mod:`.perplexity` - :class:`PerplexityEvaluation` and :class:`PerplexityComparisonEvaluation`;
* :mod:`.evaluator` - :class:`Evaluator`, :class:`ExecutionSpec` (the job's name and topology) and
  :class:`EvaluatorConfig` (what it evaluates, where the results go).

A subclass is a few lines::

    class Sums(RolloutEvaluation):
        name = "sums"
        def __init__(self, rows): self.rows = rows
        def __len__(self): return len(self.rows)
        def get(self, i): return self.rows[i]["prompt"], self.rows[i]["answer"]
        def max_new_tokens(self, inference): return 6
        def check(self, y, y_hat): return y == y_hat

    accuracy = Sums(rows)(job)                       # float; reduce="sum" | "none" also
    samples = Sums(rows).evaluate_samples(job)       # list[EvaluationSample]

Decisions (each differs from, or pins down, what theseus does):

* **One start-token convention for every path.** The job's ``start_token`` (the token the model was trained to
  read in front of every text, as its tokenizer declares it: Hugging Face's ``add_bos_token`` or the
  ``tokenizer.json`` post-processor; ``None`` when it declares none) is put in front of every text scored
  (encoding, perplexity), every comparison's context and every rollout prompt, so teacher-forced scores, perplexity
  and generation condition on the same thing. Without one, a text's first token is not scored (nothing precedes
  it), as transformers scores ``model(ids, labels=ids)``. theseus put end-of-text in front of scored texts only.

* **One float per sample, one reduction.** ``evaluate_samples`` returns one :class:`EvaluationSample` per scored
  row; ``__call__`` is exactly :func:`reduce_scores` of their ``score``\\ s: ``"mean"`` averages, ``"sum"`` sums,
  ``"none"`` returns the per-sample float64 array, anything else is a ``ValueError`` (raised before the model
  runs). The two views cannot disagree.
* **Perplexity is ppl, lower is better, everywhere.** A sample's score is its per-token perplexity
  ``exp(nll / tokens)`` over the tokens scored (every token of the text after the start token; all but the first
  without one). ``reduce="mean"`` is therefore the *mean of per-sample perplexities* (each text weighs the same),
  not the corpus perplexity ``exp(sum nll / sum tokens)``; that one is :meth:`PerplexityEvaluation.corpus_perplexity` (and
  ``InferenceJob.perplexity``). Each sample's ``metrics`` carry ``nll`` (summed, nats) and ``tokens``.
* **Comparison scores exactly the continuation's tokens.** Each continuation is scored by the job's
  ``loglikelihood(prefix, continuation)``: the log-probability of its own tokens given the prefix (the
  prediction of its first token included, nothing after its last). The choice is the argmax of the *mean*
  log-probability per token (``selection = "mean"``, the default; robust to choices of different lengths) or of
  the *sum* (``selection = "sum"``, lm-eval's ``acc``). Ties go to the first choice.
* **``clean`` receives the generated text only**: not the prompt, and cut before the end-of-text token and
  before the first end marker (``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``... see ``end_markers``) and any
  ``stop`` string. ``"B<|im_end|>\\n<|im_start|>user..."`` reaches ``clean`` as ``"B"``.
* **A reward function is called as a test run calls it** (:mod:`pytest_reward.reward.call`): a ``None`` expected
  output is not passed as ``ground_truth`` (the function's default applies), and ``original_messages`` (the
  prompt turns) is passed when the function declares it.
* **Prompts are never silently truncated**: a prompt that does not fit ``block_size - max_new_tokens`` raises
  :class:`EvaluationError` naming the sample, unless the evaluation sets ``truncate = "left"`` (keep the end of
  the prompt, where its cue is; theseus kept the head).
* **An empty evaluation is an error** (:class:`EvaluationError`), not a score of 0.
* **Intermediates** (``return_intermediates=True``, for RL consumers) are what the seed states: a list of ``(x,
  padding_mask)`` numpy pairs, one per sample, for every class (``x`` int32 (T,), ``padding_mask`` bool (T,), True
  on real tokens), so ``x, m = row`` works. Each row is an :class:`Intermediate`, which also carries the action
  mask as ``row.action_mask`` (bool (T,): the generated slots of a rollout, the scored tokens of a text, the chosen
  continuation of a comparison). Rollouts use theseus's layout (the prompt as fed, start token included,
  left-padded to ``block_size - max_new_tokens``, generation after it, slots after the stop token outside both
  masks). theseus returned triples ``(x, action_mask, padding_mask)`` from three classes and pairs from one.
* **``chunk_size``** (every class; default 200 as in the seed) bounds how many batches the job keeps in flight:
  dispatched to the devices before the host collects their results. theseus bounded the batches one compiled
  call scanned over; here a compiled call runs one batch, so the bound is on the queue, with the same purpose
  (device memory) and no effect on the results.
* **``find_accumulation_steps``** reads ``max_batch_size`` as the per-device size, as the seed's table does:
  ``(1000, 32, 2) -> (25, 20)``.

``encoding`` defaults to ``inference.tokenizer``. Another encoding (any object with ``encode``, ``decode`` and
``eot_token``; theseus's tokenizers qualify) is used through a view of the job that shares its compiled
programs; its vocabulary must fit the model's (``vocab_size`` larger than the model's raises
:class:`EvaluationError`), and any token id outside the model's vocabulary raises, naming the sample.

reward-kit's two folder functions live here too, as the seed imports them: :func:`preview_evaluation` (the
``pytest-reward preview`` command) and :func:`create_evaluation` (``pytest-reward deploy``). Each runs a pytest
session, so the pytest layer is imported when one is called, never when this package is.

Several hosts (``jax.distributed``, see ``pytest_reward.jax.hosts`` and ``docs/multi-host.md``): every process runs
the same Python; the job shards each model call over every device of every process and gives each process the
results of its own inputs, and :meth:`Evaluation.shared_samples` (what ``__call__``, the :class:`Evaluator` and the
pytest items use) makes the samples and intermediates identical on every process: process 0's when all processes
evaluated the same dataset, else the union of the processes' datasets in process order. Only process 0 writes
``results.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EvaluationError
from ..reward.chat import END_MARKERS
from .base import REDUCTIONS, Evaluation, EvaluationSample, Intermediate, reduce_scores
from .encoding import EncodingEvaluation
from .evaluator import Evaluator, EvaluatorConfig, ExecutionSpec
from .job import ModelJob
from .perplexity import PerplexityComparisonEvaluation, PerplexityEvaluation
from .rollout import RolloutEvaluation

if TYPE_CHECKING:
    from ..plugin.metrics_folders import PreviewResult

__all__ = [
    "END_MARKERS",
    "REDUCTIONS",
    "EncodingEvaluation",
    "Evaluation",
    "EvaluationError",
    "EvaluationSample",
    "Evaluator",
    "EvaluatorConfig",
    "ExecutionSpec",
    "Intermediate",
    "ModelJob",
    "PerplexityComparisonEvaluation",
    "PerplexityEvaluation",
    "RolloutEvaluation",
    "create_evaluation",
    "preview_evaluation",
    "reduce_scores",
]


def preview_evaluation(
    metric_folders: Sequence[str] | str,
    sample_file: str | Path,
    max_samples: int = 5,
) -> PreviewResult:
    """Run the reward functions of ``metric_folders`` (``["NAME=PATH", ...]``) on the first ``max_samples``
    samples of ``sample_file`` (0: all) as a pytest session, print its preview, and return the per-sample results
    (``.results``, one dict per sample and function; ``.exit_code``, the session's status)."""
    from ..plugin.metrics_folders import preview_folders

    return preview_folders(
        metric_folders,
        sample_file,
        max_samples=max_samples,
        source="metric_folders",
        samples_source="sample_file",
    )


def create_evaluation(
    evaluator_id: str,
    metric_folders: Sequence[str] | str,
    display_name: str | None = None,
    description: str | None = None,
    force: bool = False,
    *,
    target: str | None = None,
    samples: str | Path | None = None,
) -> dict[str, Any]:
    """Test ``metric_folders`` on their samples (``samples``, else those bound by marker or ini) and, if green,
    deploy them to ``target`` as ``evaluator_id``; an existing deployment with that id is replaced only when
    ``force``. Returns ``{"name": ".../<evaluator_id>", "displayName": ..., "description": ..., ...}``; raises
    ``RewardDeployError`` (or ``UsageError`` for bad input) when nothing was deployed."""
    from ..plugin.metrics_folders import deploy_folders

    return deploy_folders(
        evaluator_id,
        metric_folders,
        display_name=display_name,
        description=description,
        force=force,
        target=target,
        samples=samples,
        source="metric_folders",
        hints={"id": "evaluator_id", "samples": "samples=FILE", "force": "force=True", "target": "target="},
    )
