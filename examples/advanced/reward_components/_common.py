"""What the components share: finding the question and the answer in a conversation."""

from __future__ import annotations

from typing import Any


def last_exchange(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(the last user message before the final turn, the final assistant message), or None when either is missing."""
    if len(messages) < 2 or messages[-1].get("role") != "assistant" or not messages[-1].get("content"):
        return None
    for msg in reversed(messages[:-1]):
        if msg.get("role") == "user":
            return msg.get("content") or "", messages[-1]["content"]
    return None
