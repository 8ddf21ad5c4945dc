"""Deploy targets: where a green session ships its bundle.

* ``dir:PATH`` — copy the bundle directory and ``.tar.gz`` into PATH (staged, then renamed: an interrupted deploy
  leaves PATH as it was); ``PATH/LATEST`` names the newest bundle. The default target is ``dir:.reward/deploy``.
* ``http://URL`` / ``https://URL`` — POST the ``.tar.gz`` (``Content-Type: application/gzip``) with the bundle name,
  version and content hash in ``X-Reward-Bundle-*`` headers and, when the environment variable named by ini
  ``reward_deploy_token_env`` (default ``REWARD_DEPLOY_TOKEN``) is set, ``Authorization: Bearer <token>``. Retries
  connection errors and 5xx/429 answers with backoff; any other non-2xx answer fails. A JSON answer's ``id``
  becomes the deployed id.
* ``fireworks`` / ``fireworks:EVALUATOR_ID`` — create (or, if it exists, replace) a Fireworks evaluator with the
  payload reward-kit's ``create_evaluation`` sends (``CODE_SNIPPETS`` criteria), but with every bundle file and
  the requirements (reward-kit drops both). Needs ``FIREWORKS_API_KEY`` and ``FIREWORKS_ACCOUNT_ID``; the API base
  is ``FIREWORKS_API_BASE`` (default ``https://api.fireworks.ai``). Without credentials it refuses to run.

A deploy under a deployment id (:func:`deploy_as`, what ``pytest-reward deploy --id`` and ``create_evaluation``
do) replaces an existing deployment with that id only when forced; otherwise it raises
:class:`DeploymentExists`. ``dir:`` finds one by its bundle name in PATH; ``http(s):`` sends the id in
``X-Reward-Deployment-Id`` (and ``X-Reward-Replace: 1`` when forced) and reads a 409 answer as "exists";
``fireworks`` asks the API for the evaluator first.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import DeployError
from .bundle import BuiltBundle, copy_bundle

__all__ = [
    "DeployError",
    "DeploymentExists",
    "DirTarget",
    "FireworksTarget",
    "HttpTarget",
    "Receipt",
    "Target",
    "TargetRegistry",
    "deploy_as",
]


class DeploymentExists(DeployError):
    """The target already holds a deployment with the id asked for, and replacing it was not asked for."""


@dataclass
class Receipt:
    target: str
    id: str
    location: str
    detail: dict[str, Any] = field(default_factory=dict)
    unchanged: bool = False


class Target(Protocol):
    def deploy(self, bundle: BuiltBundle) -> Receipt: ...


Factory = Callable[[str, Any], Target]


class TargetRegistry:
    """Deploy targets by scheme (``dir``, ``http``, ``https``, ``fireworks``, and any a plugin registers)."""

    def __init__(self) -> None:
        self._factories: dict[str, tuple[Factory, str]] = {}

    def register(self, scheme: str, factory: Factory, description: str = "") -> None:
        self._factories[scheme] = (factory, description)

    def schemes(self) -> dict[str, str]:
        return {k: v[1] for k, v in sorted(self._factories.items())}

    def split(self, spec: str) -> tuple[str, str]:
        if spec.startswith(("http://", "https://")):
            return spec.split(":", 1)[0], spec
        scheme, _, rest = spec.partition(":")
        return scheme, rest

    def known(self, spec: str) -> bool:
        return self.split(spec)[0] in self._factories

    def resolve(self, spec: str, config: Any) -> Target:
        scheme, rest = self.split(spec)
        if scheme not in self._factories:
            known = ", ".join(f"{k}:" for k in sorted(self._factories))
            raise DeployError(f"unknown deploy target {spec!r}; known schemes: {known}")
        return self._factories[scheme][0](rest, config)


# --- dir: -------------------------------------------------------------------------------------------------


class DirTarget:
    def __init__(self, path: str, config: Any) -> None:
        if not path:
            raise DeployError("dir: target needs a path (dir:PATH)")
        p = Path(os.path.expanduser(path))
        self.path = p if p.is_absolute() else Path(config.rootpath) / p

    def deploy(self, bundle: BuiltBundle) -> Receipt:
        try:
            installed, unchanged = copy_bundle(bundle, self.path)
        except OSError as exc:
            raise DeployError(f"could not write to {self.path}: {exc}") from exc
        return Receipt(
            target=f"dir:{self.path}",
            id=f"{bundle.name}-{bundle.version}",
            location=str(installed.directory),
            detail={"tarball": str(installed.tarball)},
            unchanged=unchanged,
        )

    def deployments(self, name: str) -> list[Path]:
        """The bundle directories of ``name`` already in PATH (any version)."""
        if not self.path.is_dir():
            return []
        return sorted(
            d for d in self.path.glob(f"{name}-*") if d.is_dir() and (d / "manifest.json").is_file()
        )

    def deploy_as(self, bundle: BuiltBundle, deployment_id: str, *, force: bool) -> Receipt:
        existing = self.deployments(bundle.name)
        if existing and not force:
            raise DeploymentExists(
                f"{self.path} already holds deployment {deployment_id!r} ({existing[-1].name})"
            )
        # Forced: the same version is written again (its manifest may carry a new description), the others go.
        aside = self.path / f".replaced-{bundle.directory.name}-{os.getpid()}"
        same = self.path / bundle.directory.name
        if same in existing:
            os.replace(same, aside)
        try:
            receipt = self.deploy(bundle)
        except BaseException:
            if aside.exists() and not same.exists():
                os.replace(aside, same)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        for old in existing:
            if old != same:
                shutil.rmtree(old, ignore_errors=True)
                old.with_name(old.name + ".tar.gz").unlink(missing_ok=True)
        receipt.detail["replaced"] = [d.name for d in existing]
        return receipt


# --- http(s):// -------------------------------------------------------------------------------------------


def _post(url: str, data: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class HttpTarget:
    RETRIABLE = {429, 500, 502, 503, 504}

    def __init__(
        self, url: str, config: Any, *, retries: int = 3, timeout: float = 60.0, backoff: float = 0.5
    ) -> None:
        self.url = url
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        env = "REWARD_DEPLOY_TOKEN"
        if config is not None:
            env = config.getini("reward_deploy_token_env") or env
        self.token_env = env

    def deploy(self, bundle: BuiltBundle) -> Receipt:
        return self._send(bundle, {})

    def deploy_as(self, bundle: BuiltBundle, deployment_id: str, *, force: bool) -> Receipt:
        extra = {"X-Reward-Deployment-Id": deployment_id, "X-Reward-Replace": "1" if force else "0"}
        return self._send(bundle, extra, deployment_id)

    def _send(self, bundle: BuiltBundle, extra: dict[str, str], deployment_id: str | None = None) -> Receipt:
        data = bundle.tarball.read_bytes()
        headers = {
            "Content-Type": "application/gzip",
            "X-Reward-Bundle-Name": bundle.name,
            "X-Reward-Bundle-Version": bundle.version,
            "X-Reward-Bundle-Hash": bundle.content_hash,
            "User-Agent": f"pytest-reward/{bundle.manifest.get('plugin_version', '')}",
            **extra,
        }
        token = os.environ.get(self.token_env)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        last = ""
        for attempt in range(self.retries + 1):
            try:
                status, body = _post(self.url, data, headers, self.timeout)
            except (urllib.error.URLError, OSError) as exc:
                status, body, last = 0, b"", f"connection failed: {getattr(exc, 'reason', exc)}"
            else:
                if 200 <= status < 300:
                    return self._receipt(bundle, status, body)
                last = f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
                if status == 409 and deployment_id is not None:
                    raise DeploymentExists(f"{self.url} already holds deployment {deployment_id!r} ({last})")
                if status not in self.RETRIABLE:
                    break
            if attempt < self.retries:
                time.sleep(self.backoff * (2**attempt))
        raise DeployError(f"POST {self.url} failed ({last})")

    def _receipt(self, bundle: BuiltBundle, status: int, body: bytes) -> Receipt:
        answer: dict[str, Any] = {}
        if body:
            try:
                parsed = json.loads(body)
                answer = parsed if isinstance(parsed, dict) else {"answer": parsed}
            except ValueError:
                answer = {"answer": body[:200].decode("utf-8", "replace")}
        if "content_hash" in answer and answer["content_hash"] != bundle.content_hash:
            raise DeployError(
                f"POST {self.url}: the server acknowledged a different content hash {answer['content_hash']!r}"
            )
        return Receipt(
            target=self.url,
            id=str(answer.get("id") or f"{bundle.name}-{bundle.version}"),
            location=self.url,
            detail={"status": status, **answer},
        )


# --- fireworks ----------------------------------------------------------------------------------------------

_FIREWORKS_MAIN = '''"""Fireworks evaluator entry point generated by pytest-reward for {name}."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import {name} as _bundle  # noqa: E402
from pytest_reward.deploy.adapters import call_reward, result_json  # noqa: E402


def evaluate(messages, ground_truth=None, tools=None, **kwargs):
    result = call_reward(_bundle.FUNCTIONS[{function!r}], list(messages or []), ground_truth, **kwargs)
    return result_json(result)
'''


class FireworksTarget:
    def __init__(self, evaluator_id: str, config: Any, *, timeout: float = 60.0) -> None:
        self.evaluator_id = evaluator_id
        self.timeout = timeout

    def payload(self, bundle: BuiltBundle) -> dict[str, Any]:
        """The ``create evaluator`` body: reward-kit's shape, with all files and the requirements."""
        files: dict[str, str] = {}
        for path in sorted(bundle.directory.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".json", ".txt"):
                files[path.relative_to(bundle.directory).as_posix()] = path.read_text(encoding="utf-8")
        criteria = []
        for fn in bundle.manifest["functions"]:
            contents = dict(files)
            contents["main.py"] = _FIREWORKS_MAIN.format(name=bundle.name, function=fn["name"])
            criteria.append(
                {
                    "type": "CODE_SNIPPETS",
                    "name": fn["name"],
                    "description": f"{fn['name']} ({fn['module']}:{fn['attr']}), tested by pytest-reward",
                    "codeSnippets": {"language": "python", "fileContents": contents},
                }
            )
        evaluator_id = self.evaluator_id or bundle.name.replace("_", "-")
        deployment = bundle.manifest.get("deployment") or {}
        return {
            "evaluatorId": evaluator_id,
            "evaluator": {
                "displayName": deployment.get("display_name") or evaluator_id,
                "description": deployment.get("description")
                or f"pytest-reward bundle {bundle.name} {bundle.version}",
                "multiMetrics": True,
                "criteria": criteria,
                "requirements": "\n".join(bundle.manifest.get("requirements", [])),
                "rollupSettings": {"skipRollup": True},
            },
        }

    def deploy(self, bundle: BuiltBundle) -> Receipt:
        return self._create(bundle, replace=True)

    def deploy_as(self, bundle: BuiltBundle, deployment_id: str, *, force: bool) -> Receipt:
        return self._create(bundle, replace=force)

    def _create(self, bundle: BuiltBundle, *, replace: bool) -> Receipt:
        key = os.environ.get("FIREWORKS_API_KEY")
        account = os.environ.get("FIREWORKS_ACCOUNT_ID")
        if not key or not account:
            raise DeployError(
                "fireworks target needs FIREWORKS_API_KEY and FIREWORKS_ACCOUNT_ID; refusing to upload"
            )
        base = os.environ.get("FIREWORKS_API_BASE", "https://api.fireworks.ai").rstrip("/")
        body = self.payload(bundle)
        collection = f"{base}/v1/accounts/{account}/evaluators"
        item = f"{collection}/{body['evaluatorId']}"
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        if self._request("GET", item, None, headers)[0] == 200:
            if not replace:
                raise DeploymentExists(f"Fireworks already holds evaluator {body['evaluatorId']!r}")
            status, answer = self._request("DELETE", item, None, headers)
            if not 200 <= status < 300:
                raise DeployError(
                    f"Fireworks: could not replace evaluator {body['evaluatorId']} (HTTP {status}: {answer})"
                )
        status, answer = self._request("POST", collection, json.dumps(body).encode(), headers)
        if not 200 <= status < 300 or not isinstance(answer, dict) or "name" not in answer:
            raise DeployError(f"Fireworks: create evaluator failed (HTTP {status}: {str(answer)[:300]})")
        return Receipt(target="fireworks", id=str(answer["name"]), location=collection, detail=answer)

    def _request(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, Any]:
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        except (urllib.error.URLError, OSError) as exc:
            raise DeployError(f"Fireworks: {method} {url}: {getattr(exc, 'reason', exc)}") from exc
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            return status, raw[:300].decode("utf-8", "replace")


def deploy_as(target: Target, bundle: BuiltBundle, deployment_id: str, *, force: bool) -> Receipt:
    """Deploy ``bundle`` as ``deployment_id``: :class:`DeploymentExists` if the target holds one and not ``force``.
    A target without ``deploy_as`` (one a plugin registers) cannot tell, and deploys as usual."""
    method = getattr(target, "deploy_as", None)
    if method is None:
        return target.deploy(bundle)
    receipt: Receipt = method(bundle, deployment_id, force=force)
    return receipt


def builtin_targets() -> TargetRegistry:
    registry = TargetRegistry()
    registry.register("dir", DirTarget, "copy the bundle into a directory")
    registry.register("http", HttpTarget, "POST the bundle tarball")
    registry.register("https", HttpTarget, "POST the bundle tarball")
    registry.register("fireworks", FireworksTarget, "create a Fireworks evaluator")
    return registry
