"""``@reward_function``: reward-kit's decorator, with the signature analysed once, at decoration time.

Rules (reward-kit 0.4.1 semantics unless noted):

* the function must accept ``**kwargs`` (``ValueError`` at decoration time);
* ``messages`` annotated ``List[Message]`` (or ``list[Message]``) gets dict items coerced to ``Message``; so does
  ``ground_truth`` when annotated that way and not ``None``; in batch mode ``rollouts_messages`` annotated
  ``List[List[Message]]`` is coerced per rollout. Unlike reward-kit, ``Optional[List[Message]]`` and string
  annotations (``from __future__ import annotations``) are honoured too;
* a returned ``EvaluateResult`` is passed through, a dict is validated into one, a legacy ``RewardOutput`` or a
  legacy ``(score, {metric: score | MetricResult})`` tuple (the old reward-kit decorator's "legacy return format")
  is converted with a ``DeprecationWarning`` (once per function, attributed to the function's own line); anything
  else, other tuples included, raises reward-kit's
  ``ValueError("Return value from function '<name>' failed Pydantic validation for mode '<mode>': ...")``;
* user exceptions propagate unchanged; ``async def`` functions give an async wrapper;
* ``mode="batch"``: the function takes lists and returns a list of results.

All analysis happens here, once; a call costs one extra Python frame and a type check.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import TypeAdapter, ValidationError

from ..errors import RewardInputError, RewardReturnError
from .models import EvaluateResult, Message, MetricResult, RewardOutput
from .spec import RewardSpec, is_reward_function

__all__ = [
    "RewardInputError",
    "RewardReturnError",
    "RewardSpec",
    "analyse",
    "get_spec",
    "is_reward_function",
    "reward_function",
]


F = TypeVar("F", bound=Callable[..., Any])
EvaluationMode = Literal["pointwise", "batch"]
_MODES = ("pointwise", "batch")

_RESULT_ADAPTER: TypeAdapter[EvaluateResult] | None = None
_RESULT_LIST_ADAPTER: TypeAdapter[list[EvaluateResult]] | None = None


def _result_adapter() -> TypeAdapter[EvaluateResult]:
    global _RESULT_ADAPTER
    if _RESULT_ADAPTER is None:
        _RESULT_ADAPTER = TypeAdapter(EvaluateResult)
    return _RESULT_ADAPTER


def _result_list_adapter() -> TypeAdapter[list[EvaluateResult]]:
    global _RESULT_LIST_ADAPTER
    if _RESULT_LIST_ADAPTER is None:
        _RESULT_LIST_ADAPTER = TypeAdapter(list[EvaluateResult])
    return _RESULT_LIST_ADAPTER


# --- annotation analysis ---------------------------------------------------------------------------------


def _is_list_of(annotation: Any, item: Callable[[Any], bool]) -> bool:
    return (
        get_origin(annotation) in (list, Sequence)
        and bool(get_args(annotation))
        and item(get_args(annotation)[0])
    )


def _is_message_type(tp: Any) -> bool:
    return tp is Message


def _strip_optional(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_message_list(annotation: Any) -> bool:
    return _is_list_of(_strip_optional(annotation), _is_message_type)


def _is_rollouts_list(annotation: Any) -> bool:
    return _is_list_of(_strip_optional(annotation), _is_message_list)


def _resolved_annotations(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func)
    except Exception:  # forward references that cannot be resolved yet: fall back to the raw annotations
        return dict(getattr(func, "__annotations__", {}) or {})


def analyse(
    func: Callable[..., Any],
    *,
    mode: str = "pointwise",
    id: str | None = None,
    requirements: Sequence[str] | None = None,
    resources: dict[str, Any] | None = None,
    foreign: bool = False,
) -> RewardSpec:
    """Analyse ``func``'s signature once. Raises ``ValueError`` for the decoration-time errors."""
    if mode not in _MODES:
        raise ValueError(
            f"Invalid mode {mode!r} for reward function '{func.__name__}': expected one of {_MODES}."
        )
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    accepts_var_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    if not accepts_var_kwargs and not foreign:
        raise ValueError(
            f"Function '{func.__name__}' must accept **kwargs parameter. "
            "Please add '**kwargs' to the function signature."
        )
    hints = _resolved_annotations(func)
    names = tuple(p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    messages_index = positional.index("messages") if "messages" in positional else None
    if isinstance(requirements, str):
        requirements = [line.strip() for line in requirements.splitlines() if line.strip()]
    return RewardSpec(
        name=func.__name__,
        mode=mode,
        is_async=inspect.iscoroutinefunction(func),
        parameters=names,
        accepts_var_kwargs=accepts_var_kwargs,
        messages_index=messages_index,
        coerce_messages=mode == "pointwise"
        and "messages" in names
        and _is_message_list(hints.get("messages")),
        coerce_ground_truth="ground_truth" in names and _is_message_list(hints.get("ground_truth")),
        coerce_rollouts=mode == "batch"
        and "rollouts_messages" in names
        and _is_rollouts_list(hints.get("rollouts_messages")),
        id=id,
        requirements=tuple(requirements or ()),
        resources=resources,
        foreign=foreign,
        module=getattr(func, "__module__", None),
        code=_code_location(func),
    )


def _code_location(func: Callable[..., Any]) -> tuple[str, int] | None:
    code = getattr(inspect.unwrap(func), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


# --- input coercion --------------------------------------------------------------------------------------


def _to_messages(value: Any, name: str) -> list[Message]:
    if not isinstance(value, list):
        raise RewardInputError(
            f"Input '{name}' failed Pydantic validation: Expected a list for '{name}', got {type(value)}"
        )
    out: list[Message] = []
    for i, item in enumerate(value):
        if isinstance(item, Message):
            out.append(item)
        elif isinstance(item, dict):
            try:
                out.append(Message.model_validate(item))
            except (ValidationError, ValueError) as exc:
                raise RewardInputError(f"Input '{name}' failed Pydantic validation: {exc}") from None
        else:
            raise RewardInputError(
                f"Input '{name}' failed Pydantic validation: Unexpected type for item {i} in '{name}': {type(item)}"
            )
    return out


def _all_messages(value: Any) -> bool:
    # A plain loop: all() over a generator expression builds a generator on every call (the hot path).
    if value.__class__ is not list:
        return False
    for m in value:  # noqa: SIM110 (deliberately not all(): see above)
        if m.__class__ is not Message:
            return False
    return True


def _coerce_inputs(spec: RewardSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Coerce annotated message inputs in place (kwargs) or by rebuilding ``args``. Returns the new args."""
    if spec.coerce_messages:
        if "messages" in kwargs:
            if not _all_messages(kwargs["messages"]):
                kwargs["messages"] = _to_messages(kwargs["messages"], "messages")
        elif spec.messages_index is not None and spec.messages_index < len(args):
            i = spec.messages_index
            if not _all_messages(args[i]):
                args = (*args[:i], _to_messages(args[i], "messages"), *args[i + 1 :])
    if spec.coerce_ground_truth:
        gt = kwargs.get("ground_truth")
        if gt is not None and not _all_messages(gt):
            if not isinstance(gt, list):
                raise RewardInputError(
                    "Input 'ground_truth' failed Pydantic validation for List[Message]: "
                    f"expected a list, got {type(gt)}"
                )
            try:
                kwargs["ground_truth"] = _to_messages(gt, "ground_truth")
            except ValueError as exc:
                raise RewardInputError(
                    str(exc).replace("validation:", "validation for List[Message]:", 1)
                ) from None
    if spec.coerce_rollouts and "rollouts_messages" in kwargs:
        rollouts = kwargs["rollouts_messages"]
        if not isinstance(rollouts, list):
            raise RewardInputError(
                "Input 'rollouts_messages' failed Pydantic validation: "
                f"Expected a list for 'rollouts_messages', got {type(rollouts)}"
            )
        kwargs["rollouts_messages"] = [
            r if _all_messages(r) else _to_messages(r, "rollouts_messages") for r in rollouts
        ]
    return args


# --- output coercion -------------------------------------------------------------------------------------


def _validation_failure(spec: RewardSpec, exc: ValidationError, value: Any) -> RewardReturnError:
    return RewardReturnError(
        f"Return value from function '{spec.name}' failed Pydantic validation for mode '{spec.mode}':\n{exc}",
        value,
    )


def _warn_legacy(spec: RewardSpec, what: str) -> None:
    """One ``DeprecationWarning`` per function for a legacy return form. Attributed to the reward function's own
    module and line, so that warning filters and reports point at the user's code. The flag is set only once the
    warning went out (an "error" filter raises here)."""
    if spec.legacy_warned:
        return
    code = spec.code
    warnings.warn_explicit(
        f"reward function '{spec.name}' returned {what}; return EvaluateResult instead "
        "(support for this legacy form will be removed).",
        DeprecationWarning,
        filename=code[0] if code else "<reward function>",
        lineno=code[1] if code else 0,
        module=spec.module,
        registry=None,
    )
    spec.legacy_warned = True


def _from_legacy(spec: RewardSpec, result: RewardOutput) -> EvaluateResult:
    _warn_legacy(spec, "the legacy RewardOutput")
    return result.to_evaluate_result()


_TUPLE_FORM = "(score, {metric: score | MetricResult})"


def _from_tuple(spec: RewardSpec, result: tuple[Any, ...]) -> EvaluateResult:
    """The old reward-kit decorator's legacy ``(score, {name: float | MetricResult})`` tuple, converted as it did
    (a bare metric score gets the reason "<name> score"). Any other tuple is a ``RewardReturnError`` saying why."""
    problem = _tuple_problem(result)
    if problem is not None:
        raise RewardReturnError(
            f"Return value from function '{spec.name}' failed validation for mode '{spec.mode}':\n"
            f"a tuple is accepted only in the deprecated legacy form {_TUPLE_FORM}: {problem}",
            result,
        )
    score, metrics = result
    try:
        converted = {
            name: value
            if isinstance(value, MetricResult)
            else MetricResult(score=value, reason=f"{name} score")
            for name, value in metrics.items()
        }
        out = EvaluateResult(score=score, metrics=converted)
    except ValidationError as exc:
        raise _validation_failure(spec, exc, result) from None
    _warn_legacy(spec, f"a legacy {_TUPLE_FORM} tuple")
    return out


def _tuple_problem(value: tuple[Any, ...]) -> str | None:
    if len(value) != 2:
        return f"got {len(value)} items"
    score, metrics = value
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return f"the score is {type(score).__name__}, not a number"
    if not isinstance(metrics, dict):
        return f"the metrics are {type(metrics).__name__}, not a dict"
    for name, metric in metrics.items():
        if not isinstance(name, str):
            return f"metric name {name!r} is not a string"
        if isinstance(metric, bool) or not isinstance(metric, (int, float, MetricResult)):
            return f"metric {name!r} is {type(metric).__name__}, not a number or a MetricResult"
    return None


def coerce_result(spec: RewardSpec, result: Any) -> EvaluateResult:
    """Turn a pointwise return value into an ``EvaluateResult`` or raise reward-kit's ``ValueError``."""
    if isinstance(result, EvaluateResult):
        return result
    if isinstance(result, RewardOutput):
        return _from_legacy(spec, result)
    if isinstance(result, tuple):
        return _from_tuple(spec, result)
    if hasattr(result, "model_dump") and not isinstance(result, type):
        result = result.model_dump()  # an EvaluateResult of another package (an installed reward_kit)
    try:
        return _result_adapter().validate_python(result)
    except ValidationError as exc:
        raise _validation_failure(spec, exc, result) from None


def coerce_batch_result(spec: RewardSpec, result: Any) -> list[EvaluateResult]:
    """Turn a batch return value into a list of ``EvaluateResult`` or raise reward-kit's ``ValueError``."""
    if isinstance(result, EvaluateResult):
        raise RewardReturnError(
            f"Return value from function '{spec.name}' failed validation for mode 'batch': expected a list of "
            "EvaluateResult (one per rollout), got a single EvaluateResult"
        )
    if isinstance(result, list):
        if all(isinstance(r, EvaluateResult) for r in result):
            return result
        converted: list[Any] = []
        for r in result:
            if isinstance(r, RewardOutput):
                converted.append(_from_legacy(spec, r))
            elif isinstance(r, tuple):
                converted.append(_from_tuple(spec, r))
            elif hasattr(r, "model_dump") and not isinstance(r, (type, EvaluateResult)):
                converted.append(r.model_dump())
            else:
                converted.append(r)
        result = converted
    try:
        return _result_list_adapter().validate_python(result)
    except ValidationError as exc:
        raise _validation_failure(spec, exc, result) from None


# --- the decorator ---------------------------------------------------------------------------------------


def _wrap(func: Callable[..., Any], spec: RewardSpec) -> Callable[..., Any]:
    needs_input = spec.coerce_messages or spec.coerce_ground_truth or spec.coerce_rollouts
    # Pointwise fast path: an EvaluateResult is returned untouched. Batch results always go through the check.
    passthrough = EvaluateResult if spec.mode == "pointwise" else None
    coerce = coerce_result if spec.mode == "pointwise" else coerce_batch_result

    if spec.is_async:

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if needs_input:
                args = _coerce_inputs(spec, args, kwargs)
            result = await func(*args, **kwargs)
            if result.__class__ is passthrough:
                return result
            return coerce(spec, result)

        wrapper: Callable[..., Any] = async_wrapper
    elif needs_input:
        only_messages = not (spec.coerce_ground_truth or spec.coerce_rollouts)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            # Fast path: messages already Message objects, passed by keyword (how the plugin calls).
            if args or not only_messages or not _all_messages(kwargs.get("messages")):
                args = _coerce_inputs(spec, args, kwargs)
            result = func(*args, **kwargs)
            if result.__class__ is passthrough:
                return result
            return coerce(spec, result)

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            result = func(*args, **kwargs)
            if result.__class__ is passthrough:
                return result
            return coerce(spec, result)

    functools.update_wrapper(wrapper, func)
    if not needs_input and not spec.is_async and spec.mode == "pointwise":
        # What the wrapper does, for a caller making many calls (Reward.fast): call ``func``, coerce what is not an
        # EvaluateResult. The wrapper itself is named, so that a copy of this attribute on another function (a
        # user's functools.wraps around this wrapper) is never taken for it.
        wrapper.__reward_direct__ = (wrapper, func, spec)  # type: ignore[attr-defined]
    wrapper.__reward_spec__ = spec  # type: ignore[attr-defined]
    wrapper._reward_function_id = spec.id  # type: ignore[attr-defined]
    wrapper._reward_function_requirements = list(spec.requirements)  # type: ignore[attr-defined]
    wrapper._reward_function_mode = spec.mode  # type: ignore[attr-defined]
    wrapper._reward_function_resources = spec.resources  # type: ignore[attr-defined]
    wrapper.deploy = functools.partial(_deploy, wrapper)  # type: ignore[attr-defined]
    return wrapper


def _deploy(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """``fn.deploy(name=..., target=..., samples=...)``, reward-kit's method: test ``fn`` on its samples in a pytest
    session and deploy it only if green (:func:`pytest_reward.plugin.deploy_function.deploy_function`). The one
    import of this package from the pytest layer above it, made only when a function is deployed."""
    from ..plugin.deploy_function import deploy_function

    return deploy_function(fn, *args, **kwargs)


def reward_function(
    _func: F | None = None,
    *,
    mode: EvaluationMode = "pointwise",
    id: str | None = None,
    requirements: Sequence[str] | str | None = None,
    resources: dict[str, Any] | None = None,
) -> F | Callable[[F], F]:
    """Make ``func`` a reward function. Works bare (``@reward_function``) or called (``@reward_function(...)``).

    ``mode``: ``"pointwise"`` (one conversation → one ``EvaluateResult``) or ``"batch"`` (lists in, a list out).
    ``id``: a stable name for deployment. ``requirements``: pip requirement strings shipped with deploy bundles.
    The function gets reward-kit's ``.deploy(name=..., target=..., samples=...)`` method, which tests it with
    pytest and deploys it only if green.
    """

    def decorate(func: F) -> F:
        spec = analyse(func, mode=mode, id=id, requirements=requirements, resources=resources)  # type: ignore[arg-type]
        return _wrap(func, spec)  # type: ignore[return-value]

    if _func is not None:
        return decorate(_func)
    return decorate


def get_spec(obj: Any) -> RewardSpec:
    """The ``RewardSpec`` of a reward function, analysing foreign (reward-kit) functions on first use."""
    spec = getattr(obj, "__reward_spec__", None)
    if isinstance(spec, RewardSpec):
        return spec
    inner = getattr(obj, "__wrapped__", obj)
    spec = analyse(
        inner,
        mode=getattr(obj, "_reward_function_mode", "pointwise") or "pointwise",
        id=getattr(obj, "_reward_function_id", None),
        requirements=getattr(obj, "_reward_function_requirements", None),
        foreign=True,
    )
    # reward-kit's wrapper already coerces its inputs; never coerce twice.
    spec.coerce_messages = spec.coerce_ground_truth = spec.coerce_rollouts = False
    spec.is_async = inspect.iscoroutinefunction(obj)
    try:
        obj.__reward_spec__ = spec
    except (AttributeError, TypeError):
        pass
    return spec
