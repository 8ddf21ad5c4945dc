"""Tokenizers with one small interface: a dependency-free byte tokenizer, and an adapter over ``tokenizers``.

Both implement :class:`Tokenizer`, which is also the duck type theseus-style evaluation classes call
(``encode_batch(texts, allowed_special="all")``, ``decode_batch``, ``eot_token``).

Start token. ``encode`` never adds special tokens; :attr:`Tokenizer.start_token` says which token, if any, the
model was trained to read in front of every text, as the checkpoint declares it (``None``: texts are read bare).
The inference job puts it in front of everything it scores or generates from (``InferenceJob.start_token``). For a
directory it is decided, first rule that speaks:

1. ``tokenizer_config.json`` ``"add_bos_token"``: ``true`` -> the BOS token (``bos_token``, else ``config.json``
   ``bos_token_id``), ``false`` -> none (Hugging Face's switch; Llama's tokenizers set it);
2. the ``tokenizer.json`` post-processor: the one token it puts in front of a text (what
   ``tokenizer(text)`` in transformers adds, e.g. Llama 3's ``<|begin_of_text|>``); none when it adds nothing;
3. otherwise none. A GPT-2 checkpoint (``bos_token_id`` = ``<|endoftext|>`` but no ``add_bos_token`` and a
   post-processor that adds nothing) is read bare, as transformers reads it; one trained with ``<|endoftext|>`` in
   front of every document documents it with ``"add_bos_token": true`` (as the shipped ``tiny-adder`` does), or the
   caller passes ``InferenceJob(start_token=...)``.

Chat templates: :meth:`Tokenizer.apply_chat_template` renders a list of messages to a prompt string. A
tokenizer directory's Jinja ``chat_template`` (from ``tokenizer_config.json``) is used when ``jinja2`` is
importable; otherwise, and for the byte tokenizer, messages are rendered as ChatML::

    <|im_start|>system\\nYou are terse.<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

EOT_TEXT = "<|endoftext|>"
#: ``tokenizer_config.json`` key that marks a directory as using :class:`ByteTokenizer`.
BYTE_MARKER = "pytest_reward_tokenizer"


class TokenizerError(ValueError):
    """A tokenizer directory we cannot use."""


@runtime_checkable
class Tokenizer(Protocol):
    """What the inference engine and the evaluation classes need from a tokenizer."""

    @property
    def eot_token(self) -> int: ...
    @property
    def pad_token(self) -> int: ...
    @property
    def start_token(self) -> int | None: ...
    @property
    def vocab_size(self) -> int: ...
    def encode(self, text: str, allowed_special: Any = "all") -> list[int]: ...
    def encode_batch(self, texts: Sequence[str], allowed_special: Any = "all") -> list[list[int]]: ...
    def decode(self, tokens: Iterable[int]) -> str: ...
    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]: ...
    def apply_chat_template(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str: ...


def resolve_start_token(tokenizer: Tokenizer, vocab_size: int, value: int | str | None) -> int | None:
    """A model's start token from a setting: ``"auto"`` (the tokenizer's declared one, if any), a token's text
    (which must encode to one token), an id, or ``None`` (texts read bare). A ``ValueError`` names a bad value."""
    if value == "auto":
        value = getattr(tokenizer, "start_token", None)
    elif isinstance(value, str):
        ids = tokenizer.encode(value, allowed_special="all")
        if len(ids) != 1:
            raise ValueError(f"start_token={value!r} is not one token of the tokenizer (it encodes to {ids})")
        value = ids[0]
    if value is None:
        return None
    if isinstance(value, bool) or not 0 <= int(value) < vocab_size:
        raise ValueError(f"start_token={value!r} is not an id of the model's vocabulary")
    return int(value)


def _role_content(message: Any) -> tuple[str, str]:
    if isinstance(message, Mapping):
        return str(message["role"]), str(message.get("content") or "")
    return str(message.role), str(getattr(message, "content", "") or "")


def render_chatml(messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
    """The fallback chat rendering (ChatML). Messages are dicts or objects with ``role`` and ``content``."""
    text = "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in map(_role_content, messages))
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class ByteTokenizer:
    """UTF-8 bytes are tokens 0-255; special tokens (``<|endoftext|>`` first) follow from 256.

    ``encode("hé")`` -> ``[104, 195, 169]``. With ``allowed_special="all"`` (the default) special token strings in
    the text become their ids; with ``allowed_special=()`` they are encoded as plain bytes. Decoding an invalid
    UTF-8 sequence inserts U+FFFD, as ``bytes.decode(errors="replace")`` does.

    ``add_bos_token=True`` declares GPT-2's convention, ``<|endoftext|>`` in front of every text: it is then the
    :attr:`start_token` (``encode`` still adds nothing) and :meth:`save` records it for transformers too.
    """

    def __init__(
        self,
        special_tokens: Sequence[str] = (EOT_TEXT,),
        pad_token: int | None = None,
        *,
        add_bos_token: bool = False,
    ):
        if not special_tokens:
            raise TokenizerError("ByteTokenizer needs at least one special token (the end-of-text token)")
        self.special_tokens = tuple(special_tokens)
        self._special_ids = {s: 256 + i for i, s in enumerate(self.special_tokens)}
        self._pad = self.eot_token if pad_token is None else int(pad_token)
        self.add_bos_token = bool(add_bos_token)

    @property
    def eot_token(self) -> int:
        return 256

    @property
    def pad_token(self) -> int:
        return self._pad

    @property
    def bos_token(self) -> int | None:
        return None

    @property
    def start_token(self) -> int | None:
        """``<|endoftext|>`` with ``add_bos_token``, else ``None``."""
        return self.eot_token if self.add_bos_token else None

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.special_tokens)

    def _allowed(self, allowed_special: Any) -> list[str]:
        if allowed_special == "all":
            return list(self.special_tokens)
        return [s for s in self.special_tokens if s in set(allowed_special or ())]

    def encode(self, text: str, allowed_special: Any = "all") -> list[int]:
        """str -> list of ids."""
        allowed = self._allowed(allowed_special)
        out: list[int] = []
        i = 0
        while allowed:
            hits = [(j, s) for s in allowed if (j := text.find(s, i)) >= 0]
            if not hits:
                break
            j, s = min(hits, key=lambda h: (h[0], -len(h[1])))
            out.extend(text[i:j].encode("utf-8"))
            out.append(self._special_ids[s])
            i = j + len(s)
        out.extend(text[i:].encode("utf-8"))
        return out

    def encode_batch(self, texts: Sequence[str], allowed_special: Any = "all") -> list[list[int]]:
        return [self.encode(t, allowed_special) for t in texts]

    def decode(self, tokens: Iterable[int]) -> str:
        """ids -> str. Special ids render as their text; ids outside the vocabulary raise ``ValueError``."""
        buf = bytearray()
        for t in tokens:
            t = int(t)
            if 0 <= t < 256:
                buf.append(t)
            elif 256 <= t < self.vocab_size:
                buf.extend(self.special_tokens[t - 256].encode("utf-8"))
            else:
                raise ValueError(
                    f"token id {t} is outside the byte tokenizer's vocabulary (0..{self.vocab_size - 1})"
                )
        return buf.decode("utf-8", errors="replace")

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(b) for b in batch]

    def apply_chat_template(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
        return render_chatml(messages, add_generation_prompt)

    # -- files
    def save(self, directory: str | Path, model_max_length: int | None = None) -> None:
        """Write ``tokenizer_config.json`` (read by :func:`load_tokenizer`) and an equivalent ``tokenizer.json``.

        The ``tokenizer.json`` is a byte-level BPE without merges whose vocabulary maps byte ``b`` to id ``b``,
        so ``tokenizers`` / ``transformers`` users get the same ids without this package; with ``add_bos_token`` its
        post-processor puts ``<|endoftext|>`` in front of a text, as ``tokenizer(text)`` in transformers then does.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        eot = self.special_tokens[0]
        config = {
            BYTE_MARKER: "byte",
            "special_tokens": list(self.special_tokens),
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": eot,
            "bos_token": eot,
            "add_bos_token": self.add_bos_token,
            "pad_token": self.special_tokens[self._pad - 256] if self._pad >= 256 else eot,
            "unk_token": None,
            "clean_up_tokenization_spaces": False,
            "model_max_length": model_max_length or 1_000_000,
        }
        (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (d / "tokenizer.json").write_text(
            json.dumps(self._hf_json(), ensure_ascii=False) + "\n", encoding="utf-8"
        )

    def _hf_json(self) -> dict[str, Any]:
        chars = _bytes_to_unicode()
        added = [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": True}
            for s, i in self._special_ids.items()
        ]  # fmt: skip
        byte_level = {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        }
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": byte_level,
            "post_processor": self._post_processor(),
            "decoder": byte_level,
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": {chars[b]: b for b in range(256)} | dict(self._special_ids),
                "merges": [],
            },
        }

    def _post_processor(self) -> dict[str, Any] | None:
        if not self.add_bos_token:
            return None
        eot = self.special_tokens[0]
        bos = {"SpecialToken": {"id": eot, "type_id": 0}}
        return {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {eot: {"id": eot, "ids": [self.eot_token], "tokens": [eot]}},
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ByteTokenizer:
        specials = list(config.get("special_tokens") or [EOT_TEXT])
        pad = config.get("pad_token")
        add_bos = config.get("add_bos_token", False)
        if not isinstance(add_bos, bool):
            raise TokenizerError(f"add_bos_token must be true or false, got {add_bos!r}")
        return cls(
            specials, pad_token=256 + specials.index(pad) if pad in specials else None, add_bos_token=add_bos
        )


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map used by byte-level BPE."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


class HFTokenizer:
    """Adapter over a ``tokenizers.Tokenizer`` loaded from ``tokenizer.json``.

    Special tokens come from ``tokenizer_config.json`` (``eos_token``, ``pad_token``, ``bos_token``) and fall back
    to ``config.json`` ids, then to ``<|endoftext|>``. Encoding never adds BOS/EOS (``add_special_tokens=False``)
    and always recognises added special tokens in the text; decoding keeps special tokens. ``start_token`` is the
    token the checkpoint declares in front of every text (see the module docstring), ``None`` for none.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        eos_token: int | None = None,
        pad_token: int | None = None,
        bos_token: int | None = None,
        start_token: int | None = None,
        chat_template: str | None = None,
    ):
        self._tok = tokenizer
        if eos_token is None:
            eos_token = tokenizer.token_to_id(EOT_TEXT)
        if eos_token is None:
            raise TokenizerError("cannot tell the end-of-text token: set eos_token in tokenizer_config.json")
        self._eot = int(eos_token)
        self._pad = self._eot if pad_token is None else int(pad_token)
        self._bos = bos_token
        self._start = None if start_token is None else int(start_token)
        self.chat_template = chat_template

    @classmethod
    def from_directory(cls, directory: str | Path) -> HFTokenizer:
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json``, ``config.json`` when present)."""
        from tokenizers import Tokenizer as _Tok

        d = Path(directory)
        try:
            tok = _Tok.from_file(str(d / "tokenizer.json"))
        except Exception as exc:
            raise TokenizerError(f"{d / 'tokenizer.json'}: cannot be loaded by tokenizers ({exc})") from None
        tc = _read_json(d / "tokenizer_config.json")
        mc = _read_json(d / "config.json")

        def token_id(name: str, config_key: str) -> int | None:
            value = tc.get(name)
            if isinstance(value, Mapping):
                value = value.get("content")
            if isinstance(value, str) and tok.token_to_id(value) is not None:
                return int(tok.token_to_id(value))
            fallback = mc.get(config_key)
            if isinstance(fallback, list):
                fallback = fallback[0] if fallback else None
            return None if fallback is None else int(fallback)

        bos = token_id("bos_token", "bos_token_id")
        template = tc.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": "..."}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
            template = named.get("default") or next(iter(named.values()), None)
        if template is None and (d / "chat_template.jinja").exists():
            template = (d / "chat_template.jinja").read_text(encoding="utf-8")
        return cls(
            tok,
            eos_token=token_id("eos_token", "eos_token_id"),
            pad_token=token_id("pad_token", "pad_token_id"),
            bos_token=bos,
            start_token=_declared_start_token(d, tok, tc, bos),
            chat_template=template,
        )

    @property
    def eot_token(self) -> int:
        return self._eot

    @property
    def pad_token(self) -> int:
        return self._pad

    @property
    def bos_token(self) -> int | None:
        return self._bos

    @property
    def start_token(self) -> int | None:
        return self._start

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, allowed_special: Any = "all") -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str], allowed_special: Any = "all") -> list[list[int]]:
        return [list(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, tokens: Iterable[int]) -> str:
        return self._tok.decode([int(t) for t in tokens], skip_special_tokens=False)

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return self._tok.decode_batch([[int(t) for t in b] for b in batch], skip_special_tokens=False)

    def apply_chat_template(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
        """Render with the directory's Jinja chat template if jinja2 is installed, else ChatML."""
        if self.chat_template:
            try:
                import jinja2  # noqa: F401
            except ImportError:
                return render_chatml(messages, add_generation_prompt)
            return _render_jinja(self, self.chat_template, messages, add_generation_prompt)
        return render_chatml(messages, add_generation_prompt)


def _declared_start_token(d: Path, tok: Any, tc: Mapping[str, Any], bos: int | None) -> int | None:
    """The token the directory declares in front of every text (module docstring, rules 1-3)."""
    add_bos = tc.get("add_bos_token")
    if add_bos is not None:
        if not isinstance(add_bos, bool):
            raise TokenizerError(
                f"{d / 'tokenizer_config.json'}: add_bos_token must be true or false, got {add_bos!r}"
            )
        if add_bos and bos is None:
            raise TokenizerError(
                f"{d / 'tokenizer_config.json'}: add_bos_token is true but no bos_token (nor config.json "
                "bos_token_id) names the token"
            )
        return bos if add_bos else None
    probe = "a"  # what the post-processor adds around a text: the ids before the plain encoding's
    plain = list(tok.encode(probe, add_special_tokens=False).ids)
    full = list(tok.encode(probe, add_special_tokens=True).ids)
    lead = next((k for k in range(len(full) - len(plain) + 1) if full[k : k + len(plain)] == plain), 0)
    if lead > 1:
        raise TokenizerError(
            f"{d / 'tokenizer.json'}: the post-processor puts {lead} tokens ({full[:lead]}) in front of a text; "
            "only one start token is supported: pass InferenceJob(start_token=...) explicitly"
        )
    return int(full[0]) if lead == 1 else None


def _render_jinja(
    tok: HFTokenizer, template: str, messages: Sequence[Any], add_generation_prompt: bool
) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TokenizerError(f"chat template: {message}")

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    msgs = [{"role": r, "content": c} for r, c in map(_role_content, messages)]

    def text(token: int | None) -> str:
        return "" if token is None else tok.decode([token])

    return env.from_string(template).render(
        messages=msgs,
        add_generation_prompt=add_generation_prompt,
        bos_token=text(tok.bos_token),
        eos_token=text(tok.eot_token),
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path}: not valid JSON ({exc})") from None
    return data if isinstance(data, dict) else {}


def load_tokenizer(directory: str | Path) -> ByteTokenizer | HFTokenizer:
    """The tokenizer of a model directory.

    A ``tokenizer_config.json`` carrying ``"pytest_reward_tokenizer": "byte"`` gives a :class:`ByteTokenizer`
    (no dependency); otherwise ``tokenizer.json`` gives an :class:`HFTokenizer`.
    """
    d = Path(directory)
    tc = _read_json(d / "tokenizer_config.json")
    if tc.get(BYTE_MARKER) == "byte":
        return ByteTokenizer.from_config(tc)
    if (d / "tokenizer.json").exists():
        return HFTokenizer.from_directory(d)
    raise TokenizerError(
        f"{d}: no tokenizer found (expected tokenizer.json, or tokenizer_config.json with "
        f'"{BYTE_MARKER}": "byte"); pass tokenizer=ByteTokenizer() or another Tokenizer explicitly'
    )
