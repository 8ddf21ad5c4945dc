"""Shipping tested reward functions: bundles, deploy targets, trainer adapters and the reward server."""
