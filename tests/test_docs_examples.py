"""Every example in the documentation runs: each code block of every ``docs/**/*.md`` page and of README.md is
executed, or marked illustrative.

The convention (``docs/contributing-docs.md`` says it for writers):

* ``<!-- illustrative -->`` on the line directly above a fence: the block is not run.
* A fence with a title (```` ```python title="rewards.py" ````, any language) is a file: written to that path in
  the page's scratch directory, in page order, before the later blocks run. A ``--8<-- "path"`` line in it is
  replaced by that repository file, as mkdocs' snippets extension shows it.
* ```` ```python ```` without a title: run with this interpreter in the scratch directory; it must exit 0.
* ```` ```console ```` (or a ``bash`` / ``sh`` block with ``$`` prompts): every ``$ `` line is a command run with
  bash in the scratch directory; the lines after it, up to the next ``$ `` line, are its expected output (stdout
  and stderr together), matched line by line: ``...`` alone on a line matches any number of lines, ``...`` inside a
  line any text. A command expected to exit with a status other than 0 ends with ``  # exit N``; a line ending in
  ``\\`` continues on the next.
* ```` ```bash ```` / ```` ```sh ```` without prompts: one script, run with ``bash -e -o pipefail``.
* Any other block without a title is an error: it can neither run nor be written.

Each page runs in a fresh scratch directory with ``$REPO`` set to the repository root, this interpreter's
``bin/`` first on ``PATH`` (so ``python``, ``pytest`` and ``pytest-reward`` are this install's), ``COLUMNS=100``
and no inherited pytest or CI settings, so what a page shows is what a reader's terminal shows.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

ILLUSTRATIVE = "<!-- illustrative -->"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)(?P<attrs>[^`]*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
SNIPPET = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<path>[^"]+)"[ \t]*$')
EXIT = re.compile(r"\s+# exit (?P<status>\d+)$")
SCRIPTS = ("bash", "sh", "shell")
COMMAND_TIMEOUT = 300  # seconds; the slowest command of any page (a JAX model's first compile) takes ~20
# What the environment of the test run must not leak into a page's commands.
UNSET = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
         "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST", "PYTEST_VERSION", "GITHUB_STEP_SUMMARY",
         "GITHUB_ACTIONS", "CI", "FORCE_COLOR", "PY_COLORS", "REWARD_DEPLOY_TOKEN")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    title: str | None
    text: str
    illustrative: bool

    @property
    def where(self) -> str:
        return f"{_name(self.page)}:{self.line}"


def _name(page: Path) -> str:
    return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else page.name


def pages() -> list[Path]:
    return [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]


def parse(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order (fences may be indented, as in lists and admonitions)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{_name(page)}:{i + 1}: code block never closed")
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : end]]
        title = TITLE.search(opening["attrs"])
        blocks.append(
            Block(
                page=page,
                line=i + 1,
                lang=opening["lang"].lower(),
                title=title["title"] if title else None,
                text="\n".join(body) + "\n",
                illustrative=i > 0 and lines[i - 1].strip() == ILLUSTRATIVE,
            )
        )
        i = end + 1
    return blocks


def expand_snippets(text: str) -> str:
    """``--8<-- "path"`` lines replaced by the repository file, as pymdownx.snippets renders them."""
    out = []
    for line in text.splitlines(keepends=True):
        found = SNIPPET.match(line)
        out.append((REPO / found["path"]).read_text(encoding="utf-8") if found else line)
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class Command:
    line: int  # in the page
    command: str
    status: int
    expected: tuple[str, ...] | None  # None: output not shown, not checked


def commands(block: Block) -> list[Command]:
    """The ``$ `` commands of a console block, each with its expected status and output."""
    out: list[Command] = []
    rows = block.text.splitlines()
    i = 0
    while i < len(rows):
        if not rows[i].startswith("$ "):
            raise AssertionError(f"{block.where}: output before the first '$ ' command: {rows[i]!r}")
        start = i
        command = rows[i][2:]
        while command.endswith("\\") and i + 1 < len(rows):
            i += 1
            command = command[:-1] + "\n" + rows[i]
        i += 1
        expected = []
        while i < len(rows) and not rows[i].startswith("$ "):
            expected.append(rows[i])
            i += 1
        status = EXIT.search(command)
        out.append(
            Command(
                line=block.line + 1 + start,
                command=command,
                status=int(status["status"]) if status else 0,
                expected=tuple(expected) if any(e.strip() for e in expected) else None,
            )
        )
    return out


def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")))


def output_matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """Whether ``actual`` matches ``expected`` whole: ``...`` alone matches any lines, inside a line any text."""
    exp = [e.rstrip() for e in expected]
    while exp and not exp[-1]:
        exp.pop()
    patterns = [None if e.strip() == "..." else _line_pattern(e) for e in exp]
    memo: dict[tuple[int, int], bool] = {}

    def match(p: int, a: int) -> bool:
        if (p, a) not in memo:
            if p == len(patterns):
                memo[p, a] = a == len(actual)
            elif patterns[p] is None:
                memo[p, a] = any(match(p + 1, k) for k in range(a, len(actual) + 1))
            else:
                memo[p, a] = a < len(actual) and bool(patterns[p].fullmatch(actual[a])) and match(p + 1, a + 1)
        return memo[p, a]

    return match(0, 0)


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        REPO=str(REPO),
        PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]),
        # This checkout's package first (the venv's editable install may point at another checkout).
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        COLUMNS="100",
        LINES="50",
        NO_COLOR="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    return proc.returncode, proc.stdout


def _shown(output: str) -> list[str]:
    lines = [line.rstrip() for line in output.rstrip("\n").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_block(block: Block, scratch: Path, env: dict[str, str]) -> None:
    if block.title is not None:
        path = scratch / block.title
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expand_snippets(block.text), encoding="utf-8")
        return
    text = expand_snippets(block.text)
    if block.lang == "console" or (block.lang in SCRIPTS and text.startswith("$ ")):
        for cmd in commands(dataclasses.replace(block, text=text)):
            status, output = _run(["bash", "-o", "pipefail", "-c", cmd.command], scratch, env)
            where = f"{_name(block.page)}:{cmd.line}"
            shown = _shown(output)
            if status != cmd.status:
                pytest.fail(
                    f"{where}: `{cmd.command}` exited {status}, the page says {cmd.status}; its output:\n"
                    + "\n".join(shown),
                    pytrace=False,
                )
            if cmd.expected is not None and not output_matches(cmd.expected, shown):
                pytest.fail(
                    f"{where}: the output of `{cmd.command}` is not what the page shows.\n"
                    "--- the page shows:\n" + "\n".join(cmd.expected) + "\n--- the command printed:\n"
                    + "\n".join(shown),
                    pytrace=False,
                )
        return
    if block.lang in SCRIPTS:
        argv, stdin = ["bash", "-e", "-o", "pipefail", "-s"], text
    elif block.lang in ("python", "py", "python3"):
        argv, stdin = [sys.executable, "-"], text
    else:
        pytest.fail(
            f"{block.where}: a ```{block.lang or '(no language)'} block without a title can neither run nor be "
            f"written: give it a title (a file), make it console/python/bash, or put {ILLUSTRATIVE} above it",
            pytrace=False,
        )
    status, output = _run(argv, scratch, env, stdin)
    if status != 0:
        pytest.fail(
            f"{block.where}: the {block.lang} block exited {status}:\n" + "\n".join(_shown(output)), pytrace=False
        )


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    env = environment()
    for block in parse(page):
        if not block.illustrative:
            run_block(block, tmp_path, env)


# --- the runner itself: it must be able to fail ---------------------------------------------------------------


@pytest.fixture
def scratch_page(tmp_path: Path):
    def make(text: str) -> Path:
        page = tmp_path / "page.md"
        page.write_text(text, encoding="utf-8")
        return page

    return make


def _run_page(page: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for block in parse(page):
        if not block.illustrative:
            run_block(block, scratch, environment())


def test_a_page_runs_files_then_commands(scratch_page, tmp_path: Path) -> None:
    page = scratch_page(
        'Text.\n\n```python title="pkg/hello.py"\nprint("hello from", __name__)\n```\n\n'
        "```console\n$ python pkg/hello.py\nhello from __main__\n$ echo one; echo two; echo three\none\n...\n"
        "$ echo took 1.23s\ntook ...s\n$ exit 3  # exit 3\n```\n\n"
        "<!-- illustrative -->\n```ini\nnot = run\n```\n\n```bash\ntest -f pkg/hello.py\n```\n"
    )
    _run_page(page, tmp_path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("```console\n$ echo two\none\n```\n", r"\.md:2: the output of `echo two` is not what the page shows"),
        ("```console\n$ false\n```\n", r"\.md:2: `false` exited 1, the page says 0"),
        ("```console\n$ true  # exit 2\n```\n", r"exited 0, the page says 2"),
        ("```python\nraise SystemExit(4)\n```\n", r"\.md:1: the python block exited 4"),
        ("```bash\nfalse\necho never\n```\n", r"the bash block exited 1"),
        ("```json\n{}\n```\n", r"\.md:1: a ```json block without a title can neither run nor be written"),
        ("```console\nhello\n$ true\n```\n", r"\.md:1: output before the first"),
    ],
)
def test_a_page_that_is_wrong_fails_naming_its_line(scratch_page, tmp_path: Path, body: str, message: str) -> None:
    page = scratch_page(body)
    with pytest.raises((pytest.fail.Exception, AssertionError), match=message):
        _run_page(page, tmp_path)


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (("a", "...", "d"), ["a", "b", "c", "d"], True),
        (("a", "...", "d"), ["a", "d"], True),
        (("a", "d"), ["a", "b", "d"], False),
        (("a ... d",), ["a b c d"], True),
        (("a ... d",), ["a b c e"], False),
        (("...",), [], True),
        (("a",), ["a", "extra"], False),
        (("x [1.0]",), ["x [1.0]"], True),
        (("x [1.0]",), ["x 1.0"], False),
    ],
)
def test_output_matching(expected: tuple[str, ...], actual: list[str], ok: bool) -> None:
    assert output_matches(expected, actual) is ok
