"""Specialised reward functions that ``combined_reward`` composes.

The seed guide imports them (``from reward_components.helpfulness import helpfulness_reward`` ...) without showing
them; these are small implementations built on the helper functions of ``comprehensive_reward.py``. The modules
do not match pytest-reward's reward-module patterns, so they are not collected on their own: their scores are
gated through ``combined_reward``'s metrics. To score one alone:
``pytest --reward-samples samples.jsonl --reward-fn reward_components.safety:safety_reward``.
"""
