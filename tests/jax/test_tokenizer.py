"""Tokenizers: byte round trips, the tokenizers-library adapter, special tokens and chat rendering."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_reward.jax import (
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    TokenizerError,
    load_tokenizer,
    render_chatml,
)

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)  # any encodable unicode
WORDS = ["naïve", "café", "日本語", "emoji 😀🎉", "Ελληνικά", "tab\tnew\nline", "<|endoftext|>", "  spaces  "]


@pytest.fixture(scope="module")
def byte_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bytetok")
    ByteTokenizer().save(d)
    return d


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A small byte-level BPE trained here with the tokenizers library, plus a tokenizer_config.json."""
    from tokenizers import Tokenizer as HFTok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog", *WORDS] * 50, trainer)
    d = tmp_path_factory.mktemp("bpe")
    tok.save(str(d / "tokenizer.json"))
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = {"eos_token": "<|im_end|>", "pad_token": {"content": "<pad>"}, "chat_template": "X" + template}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_byte_round_trip(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode_batch(tok.encode_batch([text, text[::-1]])) == [text, text[::-1]]


def test_byte_special_tokens():
    tok = ByteTokenizer(["<|endoftext|>", "<|im_end|>"])
    assert tok.encode("a<|endoftext|>b<|im_end|>") == [97, 256, 98, 257]
    assert tok.encode("a<|endoftext|>", allowed_special=()) == list(b"a<|endoftext|>")
    assert tok.encode("<|im_end|><|endoftext|>", allowed_special={"<|im_end|>"})[0] == 257
    assert (tok.eot_token, tok.pad_token, tok.vocab_size) == (256, 256, 258)
    assert tok.decode([104, 105, 257]) == "hi<|im_end|>"
    assert tok.decode([0xC3]) == "\ufffd"  # a cut multi-byte character does not crash decoding
    with pytest.raises(ValueError, match="outside the byte tokenizer's vocabulary"):
        tok.decode([258])
    assert isinstance(tok, Tokenizer)


@settings(max_examples=100, deadline=None)
@given(TEXT)
def test_byte_tokenizer_json_gives_the_same_ids_through_tokenizers(byte_dir, text):
    ours, theirs = ByteTokenizer(), HFTokenizer.from_directory(byte_dir)
    assert theirs.encode(text) == ours.encode(text)
    assert theirs.decode(ours.encode(text)) == text


def test_load_tokenizer_prefers_the_dependency_free_byte_tokenizer(byte_dir, tmp_path):
    assert isinstance(load_tokenizer(byte_dir), ByteTokenizer)
    with pytest.raises(TokenizerError, match="no tokenizer found"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot be loaded by tokenizers"):
        load_tokenizer(tmp_path)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join) | TEXT)
def test_bpe_round_trip_non_ascii(bpe_dir, text):
    tok = load_tokenizer(bpe_dir)
    assert isinstance(tok, HFTokenizer)
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode_batch(tok.encode_batch([text, "ü"])) == [text, "ü"]


def test_bpe_special_tokens_from_tokenizer_config(bpe_dir):
    tok = load_tokenizer(bpe_dir)
    assert tok.eot_token == tok._tok.token_to_id("<|im_end|>")
    assert tok.pad_token == tok._tok.token_to_id("<pad>")
    assert tok.encode("hi<|im_end|>")[-1] == tok.eot_token
    assert len(tok.encode("the quick brown fox")) < len("the quick brown fox")  # merges are used
    assert tok.vocab_size <= 400


def test_chat_template_with_and_without_jinja(bpe_dir, monkeypatch):
    pytest.importorskip("jinja2")
    tok = load_tokenizer(bpe_dir)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo"}]
    chatml = (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.apply_chat_template(messages) == "X" + chatml  # the directory's template (it adds an "X")
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if jinja2 were not installed
    assert tok.apply_chat_template(messages) == chatml
    assert render_chatml(messages, add_generation_prompt=False) == chatml.removesuffix(
        "<|im_start|>assistant\n"
    )


def test_chat_messages_may_be_objects():
    class Msg:
        def __init__(self, role, content):
            self.role, self.content = role, content

    assert (
        ByteTokenizer().apply_chat_template([Msg("user", "x")])
        == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    )


# ---------------------------------------------------------------------------------------------- declared start token
def test_byte_tokenizer_start_token_round_trips_and_transformers_agrees(tmp_path):
    assert ByteTokenizer().start_token is None
    tok = ByteTokenizer(add_bos_token=True)
    assert tok.start_token == 256 and tok.encode("hi") == [104, 105]  # encode itself never adds it
    tok.save(tmp_path / "bos")
    ByteTokenizer().save(tmp_path / "bare")
    assert load_tokenizer(tmp_path / "bos").start_token == 256
    assert load_tokenizer(tmp_path / "bare").start_token is None
    # the same files read through tokenizers: the post-processor puts the start token in front
    from tokenizers import Tokenizer as HFTok

    assert HFTok.from_file(str(tmp_path / "bos" / "tokenizer.json")).encode("hi").ids == [256, 104, 105]
    assert HFTok.from_file(str(tmp_path / "bare" / "tokenizer.json")).encode("hi").ids == [104, 105]
    config = json.loads((tmp_path / "bos" / "tokenizer_config.json").read_text())
    config["add_bos_token"] = "yes"
    (tmp_path / "bos" / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match="add_bos_token must be true or false"):
        load_tokenizer(tmp_path / "bos")


def _hf_directory(path, post_processor=None, config=None, model_config=None):
    """A tokenizers-library BPE directory (not the byte tokenizer's), with the given post-processor and configs."""
    from tokenizers import Tokenizer as HFTok
    from tokenizers import models, pre_tokenizers

    vocab = {"<s>": 0, "</s>": 1, "<|begin_of_text|>": 2, "a": 3, "b": 4}
    tok = HFTok(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.add_special_tokens(["<s>", "</s>", "<|begin_of_text|>"])
    if post_processor is not None:
        tok.post_processor = post_processor
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", **(config or {})}))
    if model_config is not None:
        (path / "config.json").write_text(json.dumps(model_config))
    return path


def test_hf_start_token_is_what_the_checkpoint_declares(tmp_path):
    """Rules, in order: tokenizer_config.json add_bos_token (the BOS token, from bos_token or config.json's
    bos_token_id), else the token the tokenizer.json post-processor puts in front, else none."""
    from tokenizers import processors

    llama3 = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A $B",
        special_tokens=[("<|begin_of_text|>", 2)],
    )
    bos_eos = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B", special_tokens=[("<s>", 0), ("</s>", 1)]
    )
    cases = {
        "declared-true": (
            _hf_directory(tmp_path / "t", config={"add_bos_token": True, "bos_token": "<s>"}),
            0,
        ),
        "declared-by-config-json": (
            _hf_directory(tmp_path / "c", config={"add_bos_token": True}, model_config={"bos_token_id": 0}),
            0,
        ),
        "declared-false-wins": (_hf_directory(tmp_path / "f", llama3, {"add_bos_token": False}), None),
        "post-processor": (_hf_directory(tmp_path / "p", llama3), 2),
        "post-processor-bos-and-eos": (_hf_directory(tmp_path / "e", bos_eos), 0),
        "gpt2-style-nothing-declared": (
            _hf_directory(tmp_path / "n", model_config={"bos_token_id": 0}),
            None,
        ),
    }
    for name, (directory, expected) in cases.items():
        tok = load_tokenizer(directory)
        assert isinstance(tok, HFTokenizer) and tok.start_token == expected, name
        assert tok.encode("ab") == [3, 4], name  # encoding itself never adds it
    with pytest.raises(TokenizerError, match="add_bos_token is true but no bos_token"):
        load_tokenizer(_hf_directory(tmp_path / "x", config={"add_bos_token": True}))
    two = processors.TemplateProcessing(
        single="<s> <|begin_of_text|> $A",
        pair="<s> $A $B",
        special_tokens=[("<s>", 0), ("<|begin_of_text|>", 2)],
    )
    with pytest.raises(TokenizerError, match=r"puts 2 tokens .* in front of a text.*start_token="):
        load_tokenizer(_hf_directory(tmp_path / "two", two))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(max_size=30)), max_size=5
    ),
    st.booleans(),
)
def test_the_engine_and_the_plugin_render_chatml_alike(turns, generation_prompt):
    # The engine keeps its own copy (it imports nothing from the plugin); the evaluations use chat.py's.
    from pytest_reward.reward.chat import render_chatml as plugin_render

    messages = [{"role": role, "content": content} for role, content in turns]
    assert plugin_render(messages, generation_prompt) == render_chatml(messages, generation_prompt)
