"""RL trainers' reward conventions, one module per trainer holding both directions: its reward functions tested
as ours (its styles), ours handed to it (its adapter), its data preset, its bundle file and its serve route:
:mod:`.trl`, :mod:`.verl`, :mod:`.openrlhf`, :mod:`.slime`. What they share: :mod:`.results` (trainer -> us),
:mod:`.adapter` (us -> trainer); naming and detecting a style: :mod:`.styles`. No pytest.

A new trainer is a module like these, added to :data:`TRAINERS` (its styles, its bundle file); a samples format of
its own is a module under ``data/formats/``.
"""

from __future__ import annotations

from . import openrlhf, slime, trl, verl

__all__ = ["TRAINERS"]

#: Every trainer, in the order their styles are listed and their bundle files written.
TRAINERS = (trl, verl, openrlhf, slime)
