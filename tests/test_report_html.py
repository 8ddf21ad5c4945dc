"""``report.html``: structure and escaping (stdlib parser), then behaviour in headless Chromium (DevTools protocol).

The browser tests talk to Chromium over a minimal RFC 6455 websocket client (below, stdlib only): selenium is not a
dependency. They skip when ``chromium`` is not installed (CI installs the Debian package).
"""

from __future__ import annotations

import base64
import copy
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_reward.report.html import render_html

# Starting Chromium forks and immediately execs: safe, though jax (imported by other tests in this process) warns
# about any fork.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

DATA = Path(__file__).parent / "data" / "report_summary.json"
# `make screenshots` sets this to docs/images: the browser tests then keep their screenshots there for the docs.
SCREENSHOTS = os.environ.get("PYTEST_REWARD_SCREENSHOTS")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@pytest.fixture
def data() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


# --- a strict reading of the page with html.parser ----------------------------------------------------------


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.content: list[Element | str] = []  # children and text, in document order

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.content:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str, cls: str | None = None) -> list[Element]:
        return [e for e in self.iter() if e.tag == tag and (cls is None or cls in e.classes)]

    def all_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)


class Page(HTMLParser):
    """The element tree; every end tag must close the innermost open element (we never omit end tags)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.current = self.root
        self.problems: list[str] = []
        self.feed(text)
        self.close()
        if self.current is not self.root:
            self.problems.append(f"unclosed <{self.current.tag}>")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs), self.current)
        if len(dict(attrs)) != len(attrs):
            self.problems.append(f"duplicate attribute on <{tag}>")
        self.current.content.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.content.append(Element(tag, dict(attrs), self.current))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            self.problems.append(f"end tag for void <{tag}>")
        elif self.current.tag != tag:
            self.problems.append(f"</{tag}> closes <{self.current.tag}>")
        else:
            assert self.current.parent is not None
            self.current = self.current.parent

    def handle_data(self, data: str) -> None:
        self.current.content.append(data)

    def section(self, group_id: str) -> Element:
        (found,) = [e for e in self.root.find_all("section", "group") if e.attrs.get("id") == group_id]
        return found


def parse(text: str) -> Page:
    page = Page(text)
    assert page.problems == []
    return page


# --- unit tests on the fixture -----------------------------------------------------------------------------


def test_page_parses_balanced_with_one_section_per_group(data: dict[str, Any]) -> None:
    text = render_html(data)
    assert text.startswith("<!DOCTYPE html>")
    page = parse(text)
    sections = page.root.find_all("section", "group")
    assert [s.attrs["id"] for s in sections] == ["g-0", "g-1", "g-2"]
    assert [s.attrs["data-verdict"] for s in sections] == ["FAIL", "PASS", "partial"]
    assert [s.attrs["data-label"] for s in sections] == [
        "evaluate samples.jsonl",
        "format_reward samples.jsonl",
        "llm_judge data/other.jsonl",
    ]
    # the filter is in the page but only the script enables it
    (box,) = [e for e in page.root.find_all("input") if e.attrs.get("id") == "filter"]
    assert "disabled" in box.attrs
    assert len(page.root.find_all("tr", "overview-row")) == 3


def test_no_external_resources(data: dict[str, Any]) -> None:
    page = parse(render_html(data))
    url_attrs = {
        "src",
        "href",
        "action",
        "formaction",
        "srcset",
        "poster",
        "data",
        "xlink:href",
        "background",
    }
    for element in page.root.iter():
        assert element.tag not in {"img", "iframe", "object", "embed", "base", "audio", "video", "frame"}
        for name, value in element.attrs.items():
            assert not name.startswith("on"), f"inline event handler {name} on <{element.tag}>"
            assert "http" not in (value or "").lower(), (element.tag, name, value)
            if name in url_attrs:
                assert value is not None and (value.startswith("#") or value.startswith("data:")), (
                    name,
                    value,
                )
        if element.tag == "script":
            assert "src" not in element.attrs
            assert not re.search(r"\b(eval|fetch|XMLHttpRequest|import|Function)\s*\(", element.all_text())
        if element.tag == "style":
            assert "url(" not in element.all_text() and "@import" not in element.all_text()
            assert "@font-face" not in element.all_text()
        if element.tag == "link":
            assert element.attrs.get("href") == "data:,"


def test_csp_allows_exactly_the_inline_script_and_style(data: dict[str, Any]) -> None:
    page = parse(render_html(data))
    (meta,) = [
        m for m in page.root.find_all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"
    ]
    csp = meta.attrs["content"] or ""
    assert "default-src 'none'" in csp
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        (element,) = page.root.find_all(tag)
        digest = base64.b64encode(hashlib.sha256(element.all_text().encode()).digest()).decode()
        assert re.search(rf"{directive} 'sha256-{re.escape(digest)}';", csp), directive


def test_all_data_is_escaped(data: dict[str, Any]) -> None:
    text = render_html(data)
    assert "<script>alert" not in text
    assert "<svg onload" not in text and "<img" not in text
    assert "main &lt;b&gt;" in text
    page = parse(text)
    assert len(page.root.find_all("script")) == 1
    assert len(page.root.find_all("i")) == 0  # the gate note "<i>note with markup</i>" stays text
    body = page.root.all_text()
    for raw in (
        "What is 2+2? </details></td></tr></table><script>alert(1)</script>",
        "answer was <script>alert(1)</script>",
        'onerror="alert(2)"',
        "fmt-4 <svg onload=alert(3)>",
        "<!-- comment --> ]]> </pre>",
        "<i>note with markup</i>",
        "Grüße! Wie viel ist ½ + ½? 你好 🚀",
        "Zahlen: ½ ≠ 0.5 — 数学 — مرحبا — 🚀",
        "An essay about 'quotes' & \"double quotes\".",
    ):
        assert raw in body, raw
    # attribute values round-trip too (tooltips of metric reasons)
    titles = [e.attrs.get("title") for e in page.root.iter() if e.attrs.get("title")]
    assert "judge said <unparseable>" in titles


@pytest.mark.parametrize("index", [0, 1, 2])
def test_histogram_bars_count_the_samples(data: dict[str, Any], index: int) -> None:
    page = parse(render_html(data))
    group = data["groups"][index]
    (svg,) = page.section(f"g-{index}").find_all("svg", "hist")
    bars = svg.find_all("rect", "bar")
    hist = group["histogram"]
    assert len(bars) == len(hist["counts"]) + 1
    counts = [int(b.attrs["data-count"] or "") for b in bars]
    assert counts == [*hist["counts"], hist["errors"]]
    assert sum(counts) == group["summary"]["n"]
    assert "err" in bars[-1].classes and "err" not in bars[0].classes
    for bar, count in zip(bars, counts, strict=True):
        (title,) = bar.find_all("title")
        assert re.search(rf": {count} samples?$", title.all_text()), title.all_text()
    tallest = max(counts)
    for bar, count in zip(bars, counts, strict=True):
        assert float(bar.attrs["height"] or "") == pytest.approx(100 * count / tallest, abs=0.06)
    assert page.section(f"g-{index}").find_all("p", "warn") == []


def test_histogram_that_does_not_add_up_is_flagged(data: dict[str, Any]) -> None:
    data["groups"][0]["histogram"]["counts"][0] += 1
    page = parse(render_html(data))
    (warning,) = page.section("g-0").find_all("p", "warn")
    assert "13 samples" in warning.all_text() and "12" in warning.all_text()


def test_group_contents(data: dict[str, Any]) -> None:
    page = parse(render_html(data))
    g0, g1, g2 = (page.section(f"g-{i}").all_text() for i in range(3))
    for needle in (
        "0.512",  # mean
        "58.3%",  # pass rate
        "[0.321, 0.701]",  # 95 % CI of the mean
        "percentile bootstrap (2000 resamples, seed 0)",
        "quantile(0.1)",
        "≥ 0.6",
        "CI lower bound 0.3211 (95% percentile bootstrap",
        "metric 'accuracy' pass_rate",
        "Wilson score",
        "samples.jsonl:3",
        "ZeroDivisionError: division by zero",
        "score 0.05 < threshold 0.5",
        "exact match",
    ):
        assert needle in g0, needle
    assert "Versus baseline" not in g0 and "Versus baseline" in g1
    for needle in (
        "0.941 → 0.900",
        "-0.041 [-0.078, -0.006] 95% paired percentile bootstrap",
        "+0.0 pp",
        "7 / 1 / 2",
        "FAIL format_reward on samples.jsonl: mean dropped 0.041 > 0.02",
        "Most regressed",
        "Most improved",
        "-0.300",
        "+0.100",
    ):
        assert needle in g1, needle
    assert "5 of 9 expected (partial run)" in g2
    assert "3 runs · sd 0.100" in g2
    assert "partial run (5 of 9 samples ran)" in g2
    badges = [b.all_text() for b in page.section("g-0").find_all("span", "badge")]
    assert (
        badges[0] == "FAIL" and badges.count("FAIL") == 3
    )  # the group, then gates mean and metric pass_rate
    assert "not evaluated" in [b.all_text() for b in page.section("g-2").find_all("span", "badge")]
    top = page.root.find_all("header")[0].all_text()
    assert "FAIL" in top and "3 groups, 1 PASS, 1 FAIL, 1 partial · 25 samples, 4 errored" in top
    meta = page.root.find_all("div", "meta")[0].all_text()
    for needle in ("2026-11-22T22:10:00+00:00", "0.1.0", "9.2.0", "3.11.7", "abc123def456 (main <b>), dirty"):
        assert needle in meta, needle
    assert "--reward-compare-fail=mean:0.02" in meta


def test_sample_rows_merge_failing_worst_and_preview(data: dict[str, Any]) -> None:
    page = parse(render_html(data))
    per_group = [len(page.section(f"g-{i}").find_all("tr", "sample-row")) for i in range(3)]
    # crash-7 is both failing and worst: shown once, tagged with both
    assert per_group == [6, 1, 3]
    (crash,) = [r for r in page.section("g-0").find_all("tr", "sample-row") if "crash-7" in r.all_text()]
    assert [c.all_text() for c in crash.find_all("span", "chip")] == ["failing", "worst"]
    assert crash.attrs["data-verdict"] == "error"
    (flaky,) = [r for r in page.section("g-2").find_all("tr", "sample-row") if "judge-ok" in r.all_text()]
    assert [c.all_text() for c in flaky.find_all("span", "chip")] == ["flaky", "preview"]
    counter = [e for e in page.root.iter() if e.attrs.get("id") == "filter-count"]
    assert counter[0].all_text() == "10 samples"
    assert len(page.section("g-1").find_all("tr", "delta-row")) == 3


def test_long_texts_are_folded_into_details(data: dict[str, Any]) -> None:
    page = parse(render_html(data))
    (row,) = [r for r in page.section("g-0").find_all("tr", "sample-row") if "unicode-ü" in r.all_text()]
    (folded,) = [d for d in row.find_all("details") if "HIDDEN-TAIL-MARKER" in d.all_text()]
    (summary,) = folded.find_all("summary")
    assert "HIDDEN-TAIL-MARKER" not in summary.all_text()
    assert "LONG ANSWER START" in summary.all_text()
    response = data["groups"][0]["samples"]["failing"][3]["response"]
    assert summary.all_text().endswith(f"Step 4: check… [{len(response)} chars, 9 lines]")


def test_missing_and_odd_fields_do_not_crash() -> None:
    odd_group = {
        "function": None,
        "summary": {"n": "many", "mean": float("nan"), "mean_ci": {"low": None}},
        "gates": [None, {"gate": "mean", "evaluated": False}, {"value": "x", "interval": {}}],
        "histogram": {"edges": ["a"], "counts": [1, "2", None], "errors": float("inf")},
        "samples": {"failing": [None, {}, {"metrics": {"m": None}, "failures": "not a list"}], "worst": None},
        "comparison": {"mean_delta": None, "regressed": [None, {"delta": "x"}]},
    }
    for data in (
        {},
        {"groups": None},
        {"groups": [{}]},
        {"groups": [odd_group], "comparison": {"baseline": None}},
    ):
        page = parse(render_html(data))
        assert page.root.find_all("input")
    page = parse(render_html({"groups": [odd_group]}))
    assert [b.attrs["data-count"] for b in page.root.find_all("rect", "bar")] == ["1", "2", "0", "0"]


def _many_groups(data: dict[str, Any], user: str, response: str) -> dict[str, Any]:
    template = data["groups"][0]
    row = template["samples"]["preview"][0]
    groups = []
    for g in range(100):
        group = copy.deepcopy(template)
        group["function"] = f"fn_{g}"
        rows = [
            dict(row, id=f"s{i}", key=f"id:s{i}", line=i + 1, user=user, response=response) for i in range(40)
        ]
        group["samples"] = {"failing": rows[:10], "worst": rows[10:25], "preview": rows[25:]}
        groups.append(group)
    return dict(data, groups=groups)


def test_markup_stays_small_for_100_groups_of_40_samples(data: dict[str, Any]) -> None:
    text = render_html(_many_groups(data, "q", "a"))
    page = parse(text)
    assert len(page.root.find_all("tr", "sample-row")) == 4000
    assert len(page.root.find_all("rect", "bar")) == 1100
    # markup alone (texts are one character): under 600 bytes a sample row plus 8 kB a group
    assert len(text.encode()) < 4000 * 600 + 100 * 8000


def test_huge_texts_are_capped() -> None:
    huge = "z" * 1_000_000
    row = {
        "id": "big",
        "key": "k",
        "score": 0.1,
        "verdict": "fail",
        "user": huge,
        "response": huge,
        "error": huge,
    }
    text = render_html({"groups": [{"function": "f", "file": "s.jsonl", "samples": {"failing": [row]}}]})
    assert len(text) < 3 * (20_000 + 1_000) + 30_000
    assert text.count("more characters in results.jsonl") == 3


# --- headless Chromium over the DevTools protocol ----------------------------------------------------------


class CDP:
    """A minimal Chrome DevTools Protocol client: RFC 6455 websocket (masked client frames), JSON messages."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self.timeout = timeout
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        accept = base64.b64encode(
            hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
        )
        if not head.startswith(b"HTTP/1.1 101") or accept not in head:
            raise ConnectionError(f"websocket handshake failed: {head!r}")
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("DevTools closed the connection")
        self.buffer += chunk

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(
            n, "big"
        )
        self.sock.sendall(head + mask + masked)

    def _receive(self) -> dict[str, Any]:
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            mask = self._read(4) if b1 & 0x80 else b""
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 8:
                raise ConnectionError("DevTools closed the websocket")
            if opcode == 9:
                self._send_frame(10, payload)
                continue
            if opcode in (0, 1, 2):
                message += payload
                if b0 & 0x80:
                    return json.loads(message)

    def _receive_until(self, done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            message = self._receive()
            if done(message):
                return message
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(f"no {what} from Chromium within {self.timeout} s")

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self.next_id += 1
        request: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            request["sessionId"] = session
        self._send_frame(1, json.dumps(request).encode())
        ident = self.next_id
        reply = self._receive_until(lambda m: m.get("id") == ident, f"reply to {method}")
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        for i, event in enumerate(self.events):
            if event["method"] == method and event.get("sessionId") == session:
                return self.events.pop(i)
        return self._receive_until(
            lambda m: m.get("method") == method and m.get("sessionId") == session, method
        )

    def close(self) -> None:
        try:
            self._send_frame(8, b"")
        except OSError:
            pass
        self.sock.close()


class Tab:
    """One page target, attached with a flat session; records errors and every requested URL."""

    def __init__(self, cdp: CDP, *, javascript: bool = True) -> None:
        self.cdp = cdp
        target = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
        )
        if not javascript:
            self.call("Emulation.setScriptExecutionDisabled", {"value": True})

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.cdp.call(method, params, self.session)

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})
        self.cdp.wait_event("Page.loadEventFired", self.session)

    def js(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str) -> None:
        deadline = time.monotonic() + self.cdp.timeout
        while not self.js(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.02)

    def _mine(self, method: str) -> list[dict[str, Any]]:
        return [
            e["params"]
            for e in self.cdp.events
            if e["method"] == method and e.get("sessionId") == self.session
        ]

    def problems(self) -> list[str]:
        self.js("0")  # drain what the page reported so far
        out = [
            "exception: "
            + str(e["exceptionDetails"].get("exception", {}).get("description") or e["exceptionDetails"])
            for e in self._mine("Runtime.exceptionThrown")
        ]
        out += [
            f"console.{e['type']}: {[a.get('value', a.get('description')) for a in e['args']]}"
            for e in self._mine("Runtime.consoleAPICalled")
            if e["type"] in ("error", "assert", "warning")
        ]
        out += [
            f"log {e['entry']['level']}: {e['entry'].get('text')}"
            for e in self._mine("Log.entryAdded")
            if e["entry"]["level"] in ("error", "warning")
        ]
        return out

    def requested_urls(self) -> list[str]:
        return [e["request"]["url"] for e in self._mine("Network.requestWillBeSent")]

    def screenshot(self, path: Path, width: int = 1400) -> Path:
        height = min(int(self.js("document.documentElement.scrollHeight")), 4000)
        shot = self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux SIGKILL the browser when this process dies (a killed test run leaks none)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG; survives the launcher script's exec


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CDP]:
    binary = _chromium()
    if binary is None:
        pytest.skip("headless browser tests need Chromium: apt-get install chromium chromium-driver")
    tmp = tmp_path_factory.mktemp("chromium")
    log_path = tmp / "chromium.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-breakpad",
                "--remote-debugging-port=0",
                f"--user-data-dir={tmp / 'profile'}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own process group: cleanup reaches the renderers too
            preexec_fn=_die_with_parent(),
        )
    cdp = None
    try:
        deadline = time.monotonic() + 20
        while (found := re.search(rb"DevTools listening on (ws://\S+)", log_path.read_bytes())) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Chromium did not start (exit {proc.poll()}):\n{log_path.read_text(errors='replace')}"
                )
            time.sleep(0.05)
        cdp = CDP(found.group(1).decode())
        yield cdp
    finally:
        try:
            if cdp is not None:
                try:
                    cdp.call("Browser.close")  # a clean exit first; the process group is killed regardless
                finally:
                    cdp.close()
        finally:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # stray renderer / zygote processes of this browser
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


VISIBLE_ROWS = (
    "[...document.querySelectorAll('tr.sample-row')].filter(r => r.getClientRects().length > 0).length"
)
COUNTER = "document.getElementById('filter-count').textContent"


def _type(tab: Tab, text: str) -> None:
    tab.js("document.getElementById('filter').focus()")
    before = tab.js(COUNTER)
    tab.call("Input.insertText", {"text": text})
    tab.wait_for(f"{COUNTER} !== {json.dumps(before)}")


def _clear(tab: Tab) -> None:
    for kind in ("keyDown", "keyUp"):
        tab.call(
            "Input.dispatchKeyEvent",
            {"type": kind, "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27},
        )
    tab.wait_for("document.getElementById('filter').value === ''")


def test_report_in_headless_chromium(
    browser: CDP, data: dict[str, Any], tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    report = tmp_path / "report.html"
    report.write_text(render_html(data), encoding="utf-8")
    tab = Tab(browser)
    tab.open(report.as_uri())
    shot = tab.screenshot(tmp_path / "report.png")
    record_property("screenshot", str(shot))
    print(f"screenshot of the report: {shot}")
    assert shot.stat().st_size > 10_000
    _keep(shot)

    # histogram bars as rendered: counts in the DOM, and drawn heights proportional to them
    bars = tab.js(
        "[...document.querySelectorAll('section.group')].map(g => [...g.querySelectorAll('svg rect.bar')]"
        ".map(r => [Number(r.dataset.count), r.getBoundingClientRect().height]))"
    )
    assert len(bars) == len(data["groups"])
    for group, rendered in zip(data["groups"], bars, strict=True):
        counts = [c for c, _ in rendered]
        assert counts == [*group["histogram"]["counts"], group["histogram"]["errors"]]
        assert sum(counts) == group["summary"]["n"]
        tallest = max(height for _, height in rendered)
        assert tallest > 50
        for count, height in rendered:
            assert height == pytest.approx(tallest * count / max(counts), abs=0.6)

    # the filter: everything visible, then only matching rows
    total = sum(len({r["key"] for rows in g["samples"].values() for r in rows}) for g in data["groups"])
    assert tab.js("document.getElementById('filter').disabled") is False
    assert tab.js(VISIBLE_ROWS) == total == 10
    assert tab.js(COUNTER) == f"{total} of {total} samples shown"

    _type(tab, "ALERT(1)")  # case-insensitive; only xss-1 holds it
    assert tab.js(VISIBLE_ROWS) == 1
    assert tab.js(COUNTER) == f"1 of {total} samples shown"
    rows = tab.js(
        "[...document.querySelectorAll('tr.sample-row')].map(r => [r.getClientRects().length > 0, r.textContent])"
    )
    assert all(("alert(1)" in text.lower()) == shown for shown, text in rows)
    visible_groups = "[...document.querySelectorAll('section.group')].filter(g => !g.hidden).map(g => g.id)"
    assert tab.js(visible_groups) == ["g-0"]
    assert tab.js("[...document.querySelectorAll('tr.overview-row')].filter(r => !r.hidden).length") == 1

    _clear(tab)
    assert tab.js(VISIBLE_ROWS) == total
    assert tab.js(visible_groups) == ["g-0", "g-1", "g-2"]

    _type(tab, "format_reward fmt")  # a group's function name plus a row term: that group's rows
    assert tab.js(visible_groups) == ["g-1"]
    assert tab.js(VISIBLE_ROWS) == 1
    assert tab.js("[...document.querySelectorAll('tr.delta-row')].filter(r => !r.hidden).length") == 3

    _clear(tab)
    _type(tab, "no-such-sample-anywhere")
    assert tab.js(VISIBLE_ROWS) == 0
    assert tab.js(visible_groups) == []
    assert tab.js(COUNTER) == f"0 of {total} samples shown"

    assert tab.problems() == []
    foreign = [u for u in tab.requested_urls() if not u.startswith(("file://", "data:"))]
    assert foreign == []


def test_report_without_javascript_shows_everything(
    browser: CDP, data: dict[str, Any], tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    report.write_text(render_html(data), encoding="utf-8")
    tab = Tab(browser, javascript=False)
    tab.open(report.as_uri())
    assert tab.js(VISIBLE_ROWS) == 10
    assert tab.js("[...document.querySelectorAll('svg rect.bar')].length") == 33
    assert tab.js("document.getElementById('filter').disabled") is True
    assert tab.js(COUNTER) == "10 samples"
    assert tab.problems() == []


def test_console_errors_are_caught(browser: CDP, tmp_path: Path) -> None:
    """The checks above can fail: a page that throws and logs is reported."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><title>x</title><script>console.error('boom'); null.x;</script>")
    tab = Tab(browser)
    tab.open(page.as_uri())
    problems = tab.problems()
    assert any("boom" in p for p in problems) and any(p.startswith("exception") for p in problems)


def _keep(shot: Path) -> None:
    """Copy a screenshot into the docs' images when ``make screenshots`` asked for them."""
    if SCREENSHOTS:
        target = Path(SCREENSHOTS)
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target / shot.name)


TERMINAL_PROJECT = {
    "rewards.py": """
import pytest

from pytest_reward import EvaluateResult, MetricResult, reward_function


@pytest.mark.reward(threshold=0.5, mean=0.6)
@reward_function
def answer_correct(messages, ground_truth=None, **kwargs):
    response = messages[-1]["content"].strip()
    exact = response.splitlines()[-1].strip() == str(ground_truth)
    found = str(ground_truth) in response
    score = 1.0 if exact else 0.5 if found else 0.0
    return EvaluateResult(
        score=score,
        reason="answer on the last line" if exact else "answer found" if found else "answer missing",
        metrics={"found": MetricResult(score=float(found), reason=f"{ground_truth!r} in the response: {found}")},
    )
""",
    "samples.jsonl": "".join(
        json.dumps({"id": i, "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                    "ground_truth": t}) + "\n"
        for i, q, a, t in [
            ("add", "What is 2 + 3?", "2 + 3 =\n5", "5"),
            ("mul", "What is 6 * 7?", "It is 42, I think.\nDone.", "42"),
            ("sub", "What is 9 - 4?", "The answer is 6.", "5"),
        ]
    ),
}  # fmt: skip


def test_terminal_summary_in_headless_chromium(browser: CDP, tmp_path: Path) -> None:
    """The coloured terminal output of a failing run (getting-started's example), drawn as a terminal draws it."""
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    project = tmp_path / "project"
    project.mkdir()
    for name, text in TERMINAL_PROJECT.items():
        (project / name).write_text(text.lstrip(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NO_COLOR", "GITHUB_"))}
    env |= {"COLUMNS": "100", "FORCE_COLOR": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=yes", "--reward-samples",
         "samples.jsonl"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "\x1b[" in run.stdout  # coloured
    console = Console(record=True, width=100, file=open(os.devnull, "w"), force_terminal=True)  # noqa: SIM115
    console.print(Text.from_ansi(run.stdout[run.stdout.index("collected") :]))
    console.file.close()
    page = tmp_path / "terminal.html"
    page.write_text(console.export_html(theme=MONOKAI, inline_styles=True), encoding="utf-8")
    tab = Tab(browser)
    tab.open(page.as_uri())
    text = tab.js("document.body.innerText")
    table = next(line for line in text.splitlines() if line.startswith("answer_correct") and "samples.jsonl" in line)
    assert table.split()[2:5] == ["3", "0.500", "0.000"], table
    assert "FAIL answer_correct on samples.jsonl: mean 0.5 < 0.6" in text
    colours = "new Set([...document.querySelectorAll('span')].map(s => getComputedStyle(s).color)).size"
    assert tab.js(colours) >= 3  # green passes, red failures, the plain text
    assert tab.problems() == []
    assert [u for u in tab.requested_urls() if not u.startswith(("file://", "data:"))] == []
    tab.call(
        "Emulation.setDeviceMetricsOverride", {"width": 1000, "height": 200, "deviceScaleFactor": 1, "mobile": False}
    )
    shot = tab.screenshot(tmp_path / "terminal.png", width=1000)
    assert shot.stat().st_size > 10_000
    _keep(shot)
