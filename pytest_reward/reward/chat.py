"""Conversations as plain data: where a prompt ends and a response begins, the end-of-turn markers, and the short
excerpts that reports show. One implementation for the plugin, the evaluations, the rollouts and the trainer
adapters (pure functions over ``list[dict]`` messages; no pydantic, no pytest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "END_MARKERS",
    "EXCERPT",
    "as_messages",
    "conversation",
    "conversation_excerpt",
    "cut_at_markers",
    "message_text",
    "parse_chat_template",
    "prompt_of",
    "render_chatml",
    "response_from_query",
    "truth_excerpt",
    "with_response",
]

#: End-of-turn / end-of-text markers: a chat response ends at the first one (the model's turn is over).
END_MARKERS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "</s>",
)

#: Characters of a turn kept in reports (the full text stays in the samples file).
EXCERPT = 500

_SPECIAL_TAIL = re.compile(r"(?:\s*(?:<\|[^|<>]{1,40}\|>|</s>|<eos>|<end_of_turn>))+\s*$")
_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.S)
_LLAMA3 = re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|$)", re.S)


# --- excerpts ------------------------------------------------------------------------------------------------


def message_text(message: dict[str, Any] | None, limit: int = EXCERPT) -> str | None:
    """The text of one message, cut to ``limit`` characters; tool calls are named, multimodal parts joined."""
    if message is None:
        return None
    content = message.get("content")
    if content is None:
        calls = message.get("tool_calls") or []
        return "[tool calls: " + ", ".join(str((c.get("function") or {}).get("name")) for c in calls) + "]"
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if len(content) <= limit else content[:limit] + "…"


def truth_excerpt(ground_truth: Any, limit: int = EXCERPT) -> str | None:
    """A ground truth as reports show it: a string as it is, anything else as compact JSON; cut to ``limit``
    characters. None when there is none."""
    if ground_truth is None:
        return None
    text = ground_truth if isinstance(ground_truth, str) else json.dumps(
        ground_truth, ensure_ascii=False, default=str, separators=(", ", ": ")
    )
    return text if len(text) <= limit else text[:limit] + "…"


def conversation_excerpt(
    messages: Sequence[dict[str, Any]] | None, prompt: str | None = None
) -> tuple[str | None, str | None]:
    """(last user turn, final assistant turn), cut to :data:`EXCERPT` characters."""
    messages = messages or []
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    last = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    if prompt is not None and user is None:
        return message_text({"content": prompt}), None
    return message_text(user), message_text(last)


# --- prompts and responses ----------------------------------------------------------------------------------


def prompt_of(messages: Sequence[dict[str, Any]] | None, prompt: str | None) -> str | list[dict[str, Any]]:
    """What to feed a model: the ``prompt`` string, or the conversation (a chat) ending with the user turn."""
    if prompt is not None:
        return prompt
    return [{"role": m["role"], "content": m.get("content") or ""} for m in messages or []]


def with_response(prompt: str | Sequence[dict[str, Any]] | None, response: str) -> list[dict[str, Any]]:
    """The conversation to score: the prompt (a plain string is one user turn) and the assistant's ``response``."""
    if prompt is None:
        history: list[dict[str, Any]] = []
    elif isinstance(prompt, str):
        history = [{"role": "user", "content": prompt}]
    else:
        history = list(prompt)
    return [*history, {"role": "assistant", "content": response}]


def cut_at_markers(text: str, markers: Sequence[str]) -> str:
    """``text`` before the first occurrence of any marker."""
    cut = min((k for k in (text.find(m) for m in markers if m) if k >= 0), default=-1)
    return text if cut < 0 else text[:cut]


def render_chatml(messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
    """ChatML, as the engine's tokenizers render a chat without a template (messages: dicts or objects with
    ``role`` and ``content``). The JAX engine keeps its own copy (it imports nothing from the plugin); the two
    must render the same text: tests/jax/test_tokenizer.py compares them."""
    turns = []
    for m in messages:
        if isinstance(m, Mapping):
            role, content = m["role"], m.get("content")
        else:
            role, content = m.role, getattr(m, "content", "")
        turns.append(f"<|im_start|>{role}\n{content or ''}<|im_end|>\n")
    return "".join(turns) + ("<|im_start|>assistant\n" if add_generation_prompt else "")



# --- what trainers send -------------------------------------------------------------------------------------


def as_messages(value: Any) -> list[dict[str, Any]] | None:
    """A list of messages (each a dict with a ``role``), or its JSON text; None for anything else."""
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return [dict(m) for m in value]
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return as_messages(parsed)
    return None


def parse_chat_template(text: str) -> list[dict[str, Any]] | None:
    """Messages from a prompt rendered with the ChatML or Llama-3 template (as OpenRLHF and slime send them);
    the trailing empty assistant header of a generation prompt is dropped. None for plain text."""
    for pattern in (_CHATML, _LLAMA3):
        found = pattern.findall(text)
        if found:
            messages = [{"role": role, "content": content.strip("\n")} for role, content in found]
            if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
                messages.pop()
            return messages
    return None


def conversation(prompt: Any, response: Any) -> list[dict[str, Any]]:
    """Messages from a prompt (messages, a chat-templated string, or plain text) and a response."""
    messages = as_messages(prompt)
    if messages is None and isinstance(prompt, str):
        messages = parse_chat_template(prompt)
    if messages is None:
        messages = [] if prompt in (None, "") else [{"role": "user", "content": str(prompt)}]
    reply = as_messages(response)
    if reply is None:
        reply = [{"role": "assistant", "content": "" if response is None else str(response)}]
    return messages + reply


def response_from_query(query: str, prompt: str) -> str:
    """The response in a decoded query (prompt + response, as OpenRLHF sends it), without trailing special
    tokens."""
    text = query[len(prompt) :] if prompt and query.startswith(prompt) else query
    return _SPECIAL_TAIL.sub("", text)
