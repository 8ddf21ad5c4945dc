"""Regenerate the docs' generated tables in place: the options table (docs/reference/options.md) from the option
declarations, and the marker-keys table (docs/reference/marker.md) from the gate table. ``make docs-tables`` (or ``python docs/generate_tables.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_reward.judge import gates
from pytest_reward.plugin import options

REPO = Path(__file__).resolve().parents[1]
TABLES = {("options.md", "options-table"): options.markdown_table, ("marker.md", "marker-table"): gates.markdown_table}


def main() -> int:
    for (page, name), table in TABLES.items():
        path = REPO / "docs" / "reference" / page
        text = path.read_text(encoding="utf-8")
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        new = f"{head}{start}\n{table()}\n{end}{tail}"
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
