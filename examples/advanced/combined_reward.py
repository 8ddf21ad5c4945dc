"""
Example of a composite reward function that calls multiple specialized functions.

(The seed guide's code, unchanged except the import line and the ``@pytest.mark.reward`` marker. The components
live in ``reward_components/``; this module imports them, so they are not collected a second time here.)
"""
from typing import Any, Dict, List, Optional  # noqa: UP035

import pytest

# Import specialized reward functions (assuming they're defined elsewhere)
from reward_components.factuality import factuality_reward
from reward_components.helpfulness import helpfulness_reward
from reward_components.safety import safety_reward

from pytest_reward import MetricRewardOutput, RewardOutput, reward_function


@pytest.mark.reward(
    threshold=0.3,
    pass_rate=0.8,
    mean=0.45,
    metrics={"safety": {"threshold": 0.5, "pass_rate": 0.8}, "factuality": {"mean": 0.45}},
)
@reward_function
def combined_reward(
    messages: List[Dict[str, str]],  # noqa: UP006
    original_messages: Optional[List[Dict[str, str]]] = None,  # noqa: UP006, UP045
    metadata: Optional[Dict[str, Any]] = None,  # noqa: UP006, UP045
    **kwargs
) -> RewardOutput:
    """
    Combines multiple specialized reward functions into a single evaluator.

    Args:
        messages: List of conversation messages
        original_messages: Original context messages
        metadata: Optional configuration parameters
        **kwargs: Additional parameters

    Returns:
        RewardOutput with combined score and metrics
    """
    # Default settings
    metadata = metadata or {}
    weights = metadata.get("weights", {
        "helpfulness": 0.4,
        "factuality": 0.4,
        "safety": 0.2
    })

    # Call individual reward functions
    helpfulness_output = helpfulness_reward(
        messages=messages,
        original_messages=original_messages,
        **kwargs
    )

    factuality_output = factuality_reward(
        messages=messages,
        original_messages=original_messages,
        **kwargs
    )

    safety_output = safety_reward(
        messages=messages,
        original_messages=original_messages,
        **kwargs
    )

    # Combine all metrics
    all_metrics = {}

    # Add prefixed metrics from each component
    for name, metric in helpfulness_output.metrics.items():
        all_metrics[f"helpfulness_{name}"] = metric

    for name, metric in factuality_output.metrics.items():
        all_metrics[f"factuality_{name}"] = metric

    for name, metric in safety_output.metrics.items():
        all_metrics[f"safety_{name}"] = metric

    # Also add the main component scores
    all_metrics["helpfulness"] = MetricRewardOutput(
        score=helpfulness_output.score,
        reason="Overall helpfulness score"
    )

    all_metrics["factuality"] = MetricRewardOutput(
        score=factuality_output.score,
        reason="Overall factuality score"
    )

    all_metrics["safety"] = MetricRewardOutput(
        score=safety_output.score,
        reason="Overall safety score"
    )

    # Calculate weighted final score
    final_score = (
        helpfulness_output.score * weights.get("helpfulness", 0.0) +
        factuality_output.score * weights.get("factuality", 0.0) +
        safety_output.score * weights.get("safety", 0.0)
    )

    return RewardOutput(score=final_score, metrics=all_metrics)
