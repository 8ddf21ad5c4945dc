"""Data models of reward functions, compatible with reward-kit's.

``Message``, ``MetricResult``, ``EvaluateResult`` and ``StepOutput`` have reward-kit's field sets, defaults and
bounds: ``MetricResult.score`` lies in [0, 1] and needs a ``reason``; ``EvaluateResult.score`` is unbounded;
unknown keyword arguments (reward-kit's old ``success=``) are accepted and ignored. Results support dict-style
access (``result["metrics"]["x"]["score"]``), raising ``KeyError`` for names that are not fields.

``RewardOutput`` / ``MetricRewardOutput`` are the legacy result types shown in older reward-kit docs. A reward
function may still return them; ``@reward_function`` converts them to ``EvaluateResult`` and warns once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EvaluateResult",
    "FunctionCall",
    "Message",
    "MetricResult",
    "MetricRewardOutput",
    "RewardOutput",
    "StepOutput",
    "ToolCall",
]


class _DictAccess:
    """reward-kit's dict-like view of a result model: keys are the model's field names."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields:  # type: ignore[attr-defined]
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in type(self).model_fields  # type: ignore[attr-defined]

    def get(self, key: str, default: Any = None) -> Any:
        if key in type(self).model_fields:  # type: ignore[attr-defined]
            return getattr(self, key)
        return default

    def keys(self) -> list[str]:
        return list(type(self).model_fields)  # type: ignore[attr-defined]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in type(self).model_fields]  # type: ignore[attr-defined]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in type(self).model_fields]  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(type(self).model_fields)  # type: ignore[attr-defined]


class FunctionCall(BaseModel):
    """A function call requested by the assistant (OpenAI wire format)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    arguments: str = ""


class ToolCall(BaseModel):
    """One entry of ``Message.tool_calls`` (OpenAI wire format)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    type: str = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message. Any role string is accepted; ``content`` may be ``None`` when ``tool_calls`` is set.

    ``content`` may also be a list of content parts (``[{"type": "text", "text": ...}]``); ``text`` joins their
    text parts.
    """

    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = ""
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Message:
        if isinstance(obj, dict) and "role" not in obj:
            raise ValueError("Role is required")
        return super().model_validate(obj, *args, **kwargs)

    @property
    def text(self) -> str:
        """The message text: ``content`` as a string, text parts joined for multi-part content, "" for None."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "".join(str(part.get("text", "")) for part in content if part.get("type", "text") == "text")


class MetricResult(_DictAccess, BaseModel):
    """Score of one component of a reward, in [0, 1], with the reason for it."""

    model_config = ConfigDict(extra="ignore")

    is_score_valid: bool = True
    score: float = Field(..., ge=0.0, le=1.0)
    reason: str


class StepOutput(BaseModel):
    """Per-step reward of a multi-step (agent) rollout."""

    model_config = ConfigDict(extra="ignore")

    step_index: int | str
    base_reward: float
    metrics: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None


class EvaluateResult(_DictAccess, BaseModel):
    """What a reward function returns: an (unbounded) score, a reason, component metrics."""

    model_config = ConfigDict(extra="ignore")

    score: float
    is_score_valid: bool = True
    reason: str | None = None
    metrics: dict[str, MetricResult] = Field(default_factory=dict)
    step_outputs: list[StepOutput] | None = None
    error: str | None = None

    def to_reward_output(self) -> RewardOutput:
        """The legacy form of this result."""
        return RewardOutput(
            score=self.score,
            metrics={k: MetricRewardOutput(score=m.score, reason=m.reason) for k, m in self.metrics.items()},
        )


@dataclass
class MetricRewardOutput:
    """Legacy per-metric result (reward-kit docs up to 0.2.10). ``reason`` is optional."""

    score: float
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "reason": self.reason}


@dataclass
class RewardOutput:
    """Legacy result type (reward-kit docs up to 0.2.10). Prefer ``EvaluateResult``."""

    score: float
    metrics: dict[str, MetricRewardOutput] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "metrics": {k: m.to_dict() for k, m in self.metrics.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardOutput:
        metrics = {}
        for name, value in (data.get("metrics") or {}).items():
            if isinstance(value, MetricRewardOutput):
                metrics[name] = value
            else:
                metrics[name] = MetricRewardOutput(score=value.get("score", 0.0), reason=value.get("reason"))
        return cls(score=data.get("score", 0.0), metrics=metrics)

    def __str__(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_evaluate_result(self) -> EvaluateResult:
        """Convert to ``EvaluateResult``; a metric score outside [0, 1] is a validation error, as for any
        ``MetricResult``. A missing metric reason becomes ""."""
        return EvaluateResult(
            score=self.score,
            metrics={k: MetricResult(score=m.score, reason=m.reason or "") for k, m in self.metrics.items()},
        )

