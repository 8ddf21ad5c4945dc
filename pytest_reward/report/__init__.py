"""Outputs of a run: the terminal table (rich), result files, CI surfaces."""
