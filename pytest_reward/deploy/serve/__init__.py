"""``pytest-reward serve``: tested reward functions over HTTP, in the wire formats RL trainers already speak.

What is served (``BUNDLE_OR_MODULE``): a bundle directory, its package directory or its ``.tar.gz`` (through
``runtime.load_bundle``), a ``.py`` file, or ``package.module[:function]``. ``--function NAME`` keeps one function.

Routes (``docs/serve.md`` has request and response examples):

* ``GET /``, ``GET /health`` (functions, bundle name, version and content hash, thread pool use), ``GET /manifest``
  (the bundle's manifest, or one generated for a module);
* reward-kit: ``POST /reward`` (``{messages, ground_truth?, **kwargs}``) and ``POST /evaluate`` (``{messages,
  ground_truth?, tools?, kwargs?}``, the Fireworks remote shim's body) -> ``EvaluateResult`` JSON;
* OpenRLHF: ``POST /openrlhf/get_reward`` and ``POST /get_reward`` (``{query, prompts, labels}`` ->
  ``{rewards, scores, extra_logs}``, the same keys for every sample);
* slime: ``POST /slime`` (``{prompt, response, label}`` -> a bare number, or a dict with ``?format=dict``);
* every POST route again under ``/functions/{name}/...`` for one function of several.

Decisions:

* A request is scored exactly as a sample of the test run with the same fields: reward functions are called
  through :class:`pytest_reward.reward.call.Reward` (``original_messages`` defaults to ``messages[:-1]`` when the function
  declares it and the request has none; batch-mode functions get a batch of one; the result checks and their
  messages are the test run's).
* With several functions, the un-prefixed routes score their weighted mean (the bundle's weights; 1.0 each for a
  module), exactly as the generated OpenRLHF/verl adapters do: a function whose result is invalid counts 0.
* A reward function that raises, returns something unusable or a non-finite score gives HTTP 200 with score 0,
  ``is_score_valid: false`` and ``error`` (reward-kit's convention): every trainer client retries non-2xx answers
  (OpenRLHF 5 times, slime 10 times over ~3 minutes), which would only repeat a deterministic failure.
* A reward call still running when the per-request ``--timeout`` expires gives the same 200 invalid result with
  a ``TimeoutError`` (not a 504): a hang is a property of the sample, and a retry would start the same hang again
  in another worker thread. The abandoned call keeps its thread until it returns; ``/health`` counts busy threads.
* A missing or ``null`` ``ground_truth`` is not passed at all, so the function's own default applies (reward-kit's
  server substitutes ``messages[:-1]``; its client already does so before sending, so its calls are unaffected).
* Malformed requests get 422 naming the field; never NaN or Infinity in a response (a non-finite score is invalid).
* Auth, body limits, read timeouts and the access log: :mod:`.guard`.
* Concurrency: sync reward functions run in a thread pool of ``--threads`` per process, async ones on the event
  loop; ``--workers N`` > 1 starts N uvicorn worker processes sharing the socket (CPU-bound rewards need processes:
  threads share the GIL). Each process loads the target itself.
* Request content is data only: it is passed to the reward functions as arguments, never imported or executed.

Modules, each importing only those before it: :mod:`.options` (settings), :mod:`.loading` (what is served),
:mod:`.guard` (auth, limits, the guarded HTTP protocol), :mod:`.app` (the ASGI app), :mod:`.server` (bind, run,
workers), :mod:`.cli` (the command line). Importing this package is cheap: its names load on first use, and
starlette, uvicorn and pydantic only when a server is built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ...errors import ServeError

__all__ = [
    "ENV_TOKEN",
    "GuardedH11Protocol",
    "ServeError",
    "ServeOptions",
    "ServedFunction",
    "ServedRewards",
    "app_from_env",
    "bind",
    "configure",
    "create_app",
    "load_target",
    "run",
]

_HOME = {
    "ENV_TOKEN": "options",
    "ServeOptions": "options",
    "ServedFunction": "loading",
    "ServedRewards": "loading",
    "load_target": "loading",
    "GuardedH11Protocol": "guard",
    "create_app": "app",
    "app_from_env": "server",
    "bind": "server",
    "run": "server",
    "configure": "cli",
}

if TYPE_CHECKING:  # pragma: no cover
    from .app import create_app
    from .cli import configure
    from .loading import ServedFunction, ServedRewards, load_target
    from .options import ENV_TOKEN, ServeOptions
    from .server import app_from_env, bind, run

    GuardedH11Protocol: type


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
