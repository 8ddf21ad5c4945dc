"""``json_schema_reward``: Jaccard similarity between the (path, type) properties of the JSON in the response
and those of an expected JSON Schema."""

from __future__ import annotations

import json
import re
from typing import Any

from ..reward.decorator import reward_function
from ..reward.models import EvaluateResult, Message
from ._common import assistant_text, invalid, metric

_CODE_BLOCK = re.compile(r"```(?:json)?\s*([\s\S]*?)```")
_JSON_LIKE = re.compile(r"(\{[\s\S]*\}|\[[\s\S]*\])")
_TYPE_ALIASES = {"integer": "number"}


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "any")
    if isinstance(kind, list):  # ["string", "null"] -> the first non-null type
        kind = next((k for k in kind if k != "null"), "null")
    return _TYPE_ALIASES.get(str(kind), str(kind))


def extract_schema_properties(schema: dict[str, Any]) -> set[tuple[str, str]]:
    """``{(path, type)}`` for every property, pattern property and array item of ``schema``, recursively."""
    properties: set[tuple[str, str]] = set()

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, dict):
            return
        children = [
            (name, f"{prefix}.{name}" if prefix else name, sub)
            for name, sub in (node.get("properties") or {}).items()
        ]
        children += [
            (p, f"{prefix}[{p}]" if prefix else f"[{p}]", sub)
            for p, sub in (node.get("patternProperties") or {}).items()
        ]
        items = node.get("items")
        if isinstance(items, dict) and items:
            children.append(("[]", f"{prefix}[]" if prefix else "[]", items))
        for _, path, sub in children:
            if not isinstance(sub, dict):
                continue
            kind = _type(sub)
            properties.add((path, kind))
            if kind in ("object", "array"):
                walk(sub, path)

    walk(schema, "")
    return properties


def schema_of(value: Any) -> dict[str, Any]:
    """The JSON Schema shape of a JSON value (first element for arrays)."""
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: schema_of(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"type": "array", "items": schema_of(value[0])} if value else {"type": "array"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, (int, float)):
        return {"type": "number"}
    if value is None:
        return {"type": "null"}
    return {"type": "any"}


def jaccard(a: set[Any], b: set[Any]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _find_json(text: str) -> str | None:
    if blocks := _CODE_BLOCK.findall(text):
        return blocks[0]
    if (m := _JSON_LIKE.search(text)) is not None:
        try:
            json.loads(m.group(0))
            return m.group(0)
        except json.JSONDecodeError:
            return None
    return None


@reward_function
def json_schema_reward(
    messages: list[Message] | list[dict[str, Any]],
    ground_truth: Any = None,
    json_content: dict[str, Any] | str | None = None,
    expected_schema: dict[str, Any] | str | None = None,
    **kwargs: Any,
) -> EvaluateResult:
    """Jaccard similarity of the JSON's (path, type) properties and ``expected_schema``'s.

    The JSON is ``json_content`` when given, else the first fenced code block of the response, else the
    first ``{…}``/``[…]`` span that parses. Metric: ``schema_similarity``.

    Differences from reward-kit (deliberate): ``"integer"`` in the schema matches JSON integers (reward-kit
    typed every JSON number as ``"number"``, so an ``"integer"`` property never matched); nested arrays are
    walked like nested objects; a union type ``["string", "null"]`` is read as its non-null type instead of
    crashing on an unhashable list; a missing/invalid schema or invalid JSON is an invalid result.
    """
    content: Any = json_content
    if content is None:
        text, why = assistant_text(messages)
        if text is None:
            return invalid(why)
        content = _find_json(text)
        if not content:
            return invalid("No JSON content found in messages.")
    if expected_schema is None:
        return invalid("No expected schema provided for comparison.")
    schema: Any = expected_schema
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            return invalid(f"expected_schema is not valid JSON: {exc}")
    if not isinstance(schema, dict):
        return invalid(f"expected_schema must be a JSON object, got {type(schema).__name__}")
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except json.JSONDecodeError as exc:
            return invalid(f"Invalid JSON content: {exc}")
    expected = extract_schema_properties(schema)
    actual = extract_schema_properties(schema_of(content))
    similarity = jaccard(expected, actual)
    lines = []
    for label, props in (
        ("Matching", expected & actual),
        ("Missing", expected - actual),
        ("Extra", actual - expected),
    ):
        if props:
            lines.append(f"{label} properties ({len(props)}):")
            lines += [f"  - {path}: {kind}" for path, kind in sorted(props)]
    details = "\n".join(lines)
    return EvaluateResult(
        score=similarity,
        reason=f"Final score based on schema similarity: {similarity:.2f}.",
        metrics={"schema_similarity": metric(similarity, f"Schema similarity: {similarity:.2f}\n{details}")},
    )
