"""Streaming JSONL reader: samples and file:line errors."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_reward.data.samples import (
    MAX_DEPTH,
    Sample,
    SampleError,
    count_lines,
    iter_samples,
    not_a_regular_file,
    parse_expect,
    parse_record,
)
from pytest_reward.errors import SampleFormatError

GOOD = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    return path


def records(path: Path, **kw) -> list[Sample | SampleError]:
    return list(iter_samples(path, **kw))


def test_fields_ids_ground_truth_and_forwarded_kwargs(tmp_path):
    rows = [
        {**GOOD, "id": 7, "ground_truth": "42", "metadata": {"k": 1}},
        {**GOOD, "ground_truth_for_eval": [1]},
        GOOD,
    ]
    s1, s2, s3 = records(write(tmp_path, "\n".join(json.dumps(r) for r in rows).encode()))
    assert (s1.id, s1.label, s1.ground_truth, s1.kwargs) == ("7", "7", "42", {"metadata": {"k": 1}})
    assert s1.key == "id:7"
    assert s2.ground_truth == [1] and s2.label == "line-2"
    assert not s3.has_ground_truth and s3.key.startswith("q:")
    # what was asked, not where (tests/test_compare_pairing.py tests the key itself)
    assert s3.key == Sample(path=s3.path, line=99, id=None, messages=list(GOOD["messages"])).key


def test_bom_crlf_and_blank_lines(tmp_path):
    data = (
        b"\xef\xbb\xbf"
        + json.dumps(GOOD).encode()
        + b"\r\n\r\n   \n"
        + json.dumps({**GOOD, "id": "x"}).encode()
        + b"\r\n"
    )
    out = records(write(tmp_path, data))
    assert [type(r) for r in out] == [Sample, Sample]
    assert [r.line for r in out] == [1, 4]


def test_tool_call_message_with_null_content(tmp_path):
    row = {
        "messages": [
            {"role": "user", "content": "call it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
        ]
    }
    (sample,) = records(write(tmp_path, json.dumps(row).encode()))
    assert isinstance(sample, Sample)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "invalid JSON: Expecting value at column 1"),
        (b"[1, 2]", "each line must be a JSON object, got list"),
        (b'{"id": "x"}', "missing 'messages'"),
        (b'{"messages": "hi"}', "'messages' must be a list, got str"),
        (b'{"messages": []}', "'messages' is empty"),
        (b'{"messages": [{"content": "x"}]}', "messages[0] has no 'role'"),
        (
            b'{"messages": [{"role": 3, "content": "x"}]}',
            "messages[0].role must be a non-empty string, got 3",
        ),
        (b'{"messages": [{"role": "user", "content": 5}]}', "messages[0].content must be a string"),
        (
            b'{"messages": [{"role": "assistant", "content": null}]}',
            "content is null but the message has no tool_calls",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "id": 1.5}',
            "'id' must be a string or an integer",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "ground_truth": 1, "ground_truth_for_eval": 2}',
            "not both",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "expect": {"scor": 1}}',
            "unknown key(s) ['scor']",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "expect": {"min": "a"}}',
            "expect.min must be a finite number",
        ),
        (b'{"messages": [{"role": "user", "content": "\xff"}]}', "not valid UTF-8"),
    ],
)
def test_bad_lines_become_errors_naming_the_line(tmp_path, line, message):
    path = write(
        tmp_path, json.dumps(GOOD).encode() + b"\n" + line + b"\n" + json.dumps(GOOD).encode() + b"\n"
    )
    out = records(path)
    assert [type(r) for r in out] == [Sample, SampleError, Sample]
    err = out[1]
    assert err.line == 2 and err.location == "s.jsonl:2"
    assert message in err.message


def test_overlong_line_is_an_error_and_is_never_loaded(tmp_path):
    big = json.dumps({**GOOD, "pad": "x" * (10 * 2**20)}).encode()
    path = write(
        tmp_path, json.dumps(GOOD).encode() + b"\n" + big + b"\n" + json.dumps(GOOD).encode() + b"\n"
    )
    out = records(path, max_line_bytes=2**20)
    assert [type(r) for r in out] == [Sample, SampleError, Sample]
    assert "10.0 MiB, over the 1 MiB limit" in out[1].message and out[2].line == 3
    # With a higher limit the same line is a valid sample.
    assert [type(r) for r in records(path, max_line_bytes=16 * 2**20)] == [Sample, Sample, Sample]


def test_prompt_only_samples(tmp_path):
    rows = [{"prompt": "1+1="}, {"messages": [{"role": "user", "content": "hi"}]}, GOOD, {"prompt": 3}]
    a, b, c, d = records(write(tmp_path, "\n".join(json.dumps(r) for r in rows).encode()))
    assert a.prompt_only and a.messages is None and b.prompt_only and not c.prompt_only
    assert isinstance(d, SampleError) and "'prompt' must be a string" in d.message


def test_expect_parsing():
    e = parse_expect({"score": 0.67, "tol": 0.01, "metrics": {"m": {"min": 0.5}}})
    assert e.score.check(0.675) is None and "expected 0.67 ± 0.01" in e.score.check(0.7)
    assert dict(e.metrics)["m"].check(0.4) == "expected ≥ 0.5, got 0.4"
    assert parse_expect({"max": 0.2}).score.check(0.3) == "expected ≤ 0.2, got 0.3"
    with pytest.raises(ValueError, match="min 1 > max 0"):
        parse_expect({"min": 1, "max": 0})
    with pytest.raises(ValueError, match="is empty"):
        parse_expect({})


def test_count_lines(tmp_path):
    assert count_lines(write(tmp_path, b"a\nb\nc")) == 3
    assert count_lines(write(tmp_path, b"a\nb\n")) == 2
    assert count_lines(write(tmp_path, b"")) == 0


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(st.lists(st.fixed_dictionaries({"user": text, "answer": text, "gt": text}), min_size=1, max_size=8))
def test_any_valid_rows_round_trip_in_order(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("h") / "s.jsonl"
    with open(path, "w", encoding="utf-8", newline="\r\n") as fh:
        for r in rows:
            fh.write(
                json.dumps(
                    {
                        "messages": [
                            {"role": "user", "content": r["user"]},
                            {"role": "assistant", "content": r["answer"]},
                        ],
                        "ground_truth": r["gt"],
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    out = list(iter_samples(path))
    assert all(isinstance(s, Sample) for s in out)
    assert [(s.messages[0]["content"], s.messages[1]["content"], s.ground_truth) for s in out] == [
        (r["user"], r["answer"], r["gt"]) for r in rows
    ]


_json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=10,
)


def read_line(tmp_path: Path, line: str) -> Sample | SampleError:
    """What the reader makes of a file holding the one line ``line``."""
    path = tmp_path / "one.jsonl"
    path.write_bytes(line.encode())
    (out,) = iter_samples(path, keys=False)
    return out


def as_read(out: Sample | SampleError) -> tuple[str, str]:
    if isinstance(out, SampleError):
        return "error", out.message
    return "record", json.dumps(out.record)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    _json_values,
    st.booleans(),
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["", "\n", " \n", "\r\n", "  ", " x", ",", "]"]),
)
def test_a_line_reads_as_json_loads_reads_it(tmp_path, value, in_a_sample, head, tail):
    """Any line gives the sample json.loads would give, or the error of json.loads' own message and column,
    whether the value is a whole sample or anything else."""
    body = {"messages": GOOD["messages"], "x": value} if in_a_sample else value
    line = head + json.dumps(body) + tail
    try:
        decoded = json.loads(line)
    except json.JSONDecodeError as exc:
        expected = ("error", f"invalid JSON: {exc.msg} at column {exc.colno}")
    else:
        try:
            expected = ("record", json.dumps(parse_record(decoded, Path("one.jsonl"), 1).record))
        except SampleFormatError as exc:
            expected = ("error", str(exc))
    assert as_read(read_line(tmp_path, line)) == expected
    if in_a_sample and tail in ("", "\n", " \n", "\r\n", "  "):
        assert expected[0] == "record"  # the case is not vacuous: whole samples do read


_message_like = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "", " ", "\t", "\u3000"])
            | st.integers()
            | st.none(),
            "content": st.text(max_size=5)
            | st.none()
            | st.integers()
            | st.lists(st.just({"type": "text"}) | st.just("part"), max_size=2),
            "tool_calls": st.none() | st.lists(st.just({}) | st.just(1), max_size=1) | st.just("x"),
            "function_call": st.none() | st.just({"name": "f"}),
        },
    ),
    st.text(max_size=3),
    st.none(),
)


def message_is_valid(msg: object) -> bool:
    """The message rules, as the reader documents them: an object with a non-blank string role; content a
    string, a list of objects, or null when the message calls a tool; tool_calls, when given, a list of
    objects."""
    if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or not msg["role"].strip():
        return False
    content = msg.get("content", "")
    if content is None:
        content_ok = bool(msg.get("tool_calls") or msg.get("function_call"))
    elif isinstance(content, list):
        content_ok = all(isinstance(part, dict) for part in content)
    else:
        content_ok = isinstance(content, str)
    calls = msg.get("tool_calls")
    return content_ok and (
        calls is None or (isinstance(calls, list) and all(isinstance(c, dict) for c in calls))
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_message_like, min_size=1, max_size=3))
# the fast path's shape, but bad tool_calls
@example([{"role": "assistant", "content": "a", "tool_calls": "x"}])
@example([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "tool_calls": [1]}])
@example([{"role": "\u3000", "content": "a"}])  # a blank role in a non-ASCII space
@example([{"role": "user", "content": None, "function_call": {"name": "f"}}])
def test_messages_are_accepted_exactly_when_every_one_is_valid(tmp_path, messages):
    """The reader accepts a conversation exactly when every message keeps the rules, and otherwise names the
    first message that breaks them (the usual message is checked on a fast path: it must agree)."""
    out = read_line(tmp_path, json.dumps({"messages": messages}) + "\n")
    bad = [i for i, msg in enumerate(messages) if not message_is_valid(msg)]
    if not bad:
        assert isinstance(out, Sample), out
        assert out.messages == messages
    else:
        assert isinstance(out, SampleError)
        assert out.message.startswith(f"messages[{bad[0]}]"), (out.message, messages)


# --- a bad line costs that line, never the file --------------------------------------------------------------------

PREFIX = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "x": '


def between_good_lines(tmp_path: Path, line: str) -> list[Sample | SampleError]:
    good = json.dumps(GOOD)
    return records(write(tmp_path, f"{good}\n{line}\n{good}\n".encode()))


def test_a_100k_deep_line_is_a_line_error(tmp_path):
    """Regression: json's RecursionError escaped the reader and lost the whole file."""
    out = between_good_lines(tmp_path, PREFIX + "[" * 100_000 + "]" * 100_000 + "}")
    assert [type(r) for r in out] == [Sample, SampleError, Sample]
    assert out[1].location == "s.jsonl:2"
    assert (
        out[1].message == f"nested more than {MAX_DEPTH} levels deep (arrays and objects inside each other)"
    )


def test_a_5000_digit_integer_is_a_line_error(tmp_path):
    """Regression: the ValueError of Python's int digit limit escaped the reader and lost the whole file."""
    out = between_good_lines(tmp_path, PREFIX + "7" * 5000 + "}")
    assert [type(r) for r in out] == [Sample, SampleError, Sample]
    assert out[1].message.startswith(
        "invalid JSON: Exceeds the limit (4300 digits) for integer string conversion"
    )


@pytest.mark.parametrize("where", ['"score": 1{}', '"min": 1{}', '"metrics": {{"m": {{"max": 1{}}}}}'])
def test_an_expectation_too_large_for_a_float_is_a_line_error(tmp_path, where):
    """Regression: an integer bound over the float range raised OverflowError out of the reader."""
    line = PREFIX + '0, "expect": {' + where.format("0" * 400) + "}}"
    out = between_good_lines(tmp_path, line)
    assert [type(r) for r in out] == [Sample, SampleError, Sample]
    assert "must be a finite number" in out[1].message


@given(depth=st.integers(1, 3000), opener=st.sampled_from(["[", '{"k": ']))
def test_nesting_is_accepted_exactly_up_to_the_limit(tmp_path_factory, depth, opener):
    """A line is an error exactly when it nests more than MAX_DEPTH levels (the line's object is level 1), whatever
    the depth, from shallow to far beyond what json can decode."""
    closer = "]" if opener == "[" else "}"
    line = PREFIX + opener * depth + "0" + closer * depth + "}"
    out = between_good_lines(tmp_path_factory.mktemp("deep"), line)
    assert [type(r) for r in out][::2] == [Sample, Sample]
    assert isinstance(out[1], SampleError) == (depth + 1 > MAX_DEPTH)


def test_the_depth_limit_does_not_depend_on_the_call_stack(tmp_path):
    """The same line is accepted (or not) at the top of the stack and 600 frames down."""
    path = write(
        tmp_path, "\n".join(PREFIX + "[" * d + "]" * d + "}" for d in (MAX_DEPTH - 1, MAX_DEPTH)).encode()
    )

    def kinds_at(frames: int) -> list[type]:
        return [type(r) for r in records(path)] if frames == 0 else kinds_at(frames - 1)

    assert kinds_at(0) == kinds_at(600) == [Sample, SampleError]


@given(digits=st.integers(1, 6000))
def test_integers_are_accepted_exactly_up_to_pythons_digit_limit(tmp_path_factory, digits):
    out = between_good_lines(tmp_path_factory.mktemp("int"), PREFIX + "9" * digits + "}")
    assert [type(r) for r in out][::2] == [Sample, Sample]
    assert isinstance(out[1], SampleError) == (digits > sys.get_int_max_str_digits())


@given(st.lists(st.text(max_size=60) | st.binary(max_size=60).map(lambda b: b.decode("latin-1")), max_size=6))
def test_any_bytes_give_one_record_per_non_blank_line_and_never_raise(tmp_path_factory, lines):
    data = "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines).encode(
        "utf-8", "surrogatepass"
    )
    out = records(write(tmp_path_factory.mktemp("any"), data))
    non_blank = [
        i + 1 for i, line in enumerate(data.split(b"\n")) if line.strip() and line != b"\xef\xbb\xbf"
    ]
    assert [r.line for r in out] == non_blank


# --- FIFOs, sockets and devices: reported, never read ------------------------------------------------------------


def _in_a_thread(fn):
    """Run ``fn`` in a thread and give its result; a call that blocks fails the test instead of hanging it."""
    box: list = []
    worker = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert box, "blocked: the reader opened a FIFO for a blocking read"
    return box[0]


def test_a_fifo_is_one_error_and_is_never_waited_on(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    out = _in_a_thread(lambda: records(fifo))
    assert len(out) == 1 and isinstance(out[0], SampleError) and out[0].location == "pipe.jsonl:1"
    assert "is a FIFO (named pipe), not a regular file" in out[0].message
    assert _in_a_thread(lambda: count_lines(fifo)) == 0
    assert not_a_regular_file(fifo) == "a FIFO (named pipe)"


def test_a_socket_and_a_device_are_named(tmp_path):
    path = tmp_path / "sock.jsonl"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        assert not_a_regular_file(path) == "a socket"
        assert "is a socket" in records(path)[0].message
    assert not_a_regular_file("/dev/null") == "a character device"
    assert "is a character device" in records(Path("/dev/null"))[0].message
    assert not_a_regular_file(write(tmp_path, b"{}")) is None
    assert not_a_regular_file(tmp_path) is None and not_a_regular_file(tmp_path / "missing") is None
