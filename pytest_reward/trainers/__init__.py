"""RL trainers' reward conventions, one module per trainer holding both directions: its reward functions tested
as ours (its style), ours handed to it (its adapter), its data preset, its bundle file and its serve route:
:mod:`.trl`, :mod:`.verl`, :mod:`.openrlhf`, :mod:`.slime`. What they share: :mod:`.results` (trainer -> us),
:mod:`.adapter` (us -> trainer); naming and detecting a style: :mod:`.styles`. No pytest."""
