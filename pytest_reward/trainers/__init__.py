"""RL trainers' reward conventions (TRL, verl, OpenRLHF, slime): their reward functions wrapped as ours
(:mod:`.styles`). No pytest."""
