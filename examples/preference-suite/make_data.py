"""Write this project's samples files from the held-out pairs of the shipped ``tiny-sum-rm``.

    python make_data.py

The pairs and answers come from problems that neither the reward model nor the ``tiny-adder`` trunk it started from
was trained on (``pytest_reward/jax/models/tiny-sum-rm/heldout.jsonl``, in file order):

* ``pairs.jsonl``: the first 20 pairs of each subset, ``{"id", "prompt", "chosen", "rejected", "subset", "kind"}``.
  ``subset``: ``three-digit`` when both numbers have three digits, else ``carry`` when the addition carries, else
  ``no-carry``; ``kind``: how the rejected answer is wrong (off by one, two digits swapped, a carry dropped, one digit
  changed), a field of the pair that reports show and rewards may read;
* ``answers.jsonl``: the correct answers of the next 60 held-out problems, as conversations.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELDOUT = HERE.parents[1] / "pytest_reward" / "jax" / "models" / "tiny-sum-rm" / "heldout.jsonl"
PER_SUBSET = 20
ANSWERS = 60


def subset(prompt: str) -> str:
    a, b = prompt.rstrip("=").split("+")
    if len(a) == len(b) == 3:
        return "three-digit"
    x, y = int(a), int(b)
    while x or y:
        if x % 10 + y % 10 >= 10:
            return "carry"
        x, y = x // 10, y // 10
    return "no-carry"


def main() -> None:
    rows = [json.loads(line) for line in HELDOUT.read_text(encoding="utf-8").splitlines()]
    pairs, used = [], set()
    for i, row in enumerate(rows):
        name = subset(row["prompt"])
        if sum(p["subset"] == name for p in pairs) < PER_SUBSET:
            pairs.append({"id": f"pair-{i:04d}", **{k: row[k] for k in ("prompt", "chosen", "rejected")},
                          "subset": name, "kind": row["kind"]})  # fmt: skip
            used.add(i)
    answers = [
        {"id": f"answer-{i:04d}", "messages": [{"role": "user", "content": row["prompt"]},
                                                {"role": "assistant", "content": row["chosen"]}]}
        for i, row in enumerate(rows)
        if i not in used
    ][:ANSWERS]  # fmt: skip
    for name, lines in (("pairs.jsonl", pairs), ("answers.jsonl", answers)):
        (HERE / name).write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
        print(f"wrote {len(lines)} lines to {name}")


if __name__ == "__main__":
    main()
