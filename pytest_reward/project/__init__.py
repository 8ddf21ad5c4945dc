"""The user's project: its reward modules on disk (:mod:`.loading`) and the reward functions found in them
(:mod:`.functions`). No pytest: discovery, deploy bundles, the server and executor workers all use it."""
