"""
Example of a contextual reward function that evaluates responses based on conversation history.

(The seed guide's code, unchanged except the import line and the ``@pytest.mark.reward`` marker.)
"""
import re
from typing import Any, Dict, List, Optional  # noqa: F401, UP035

import pytest

from pytest_reward import MetricRewardOutput, RewardOutput, reward_function


@pytest.mark.reward(
    threshold=0.4,
    pass_rate=0.8,
    mean=0.6,
    quantile={0.5: 0.6},
    metrics={"query_addressing": {"mean": 0.6}},
)
@reward_function
def contextual_reward(
    messages: List[Dict[str, str]],  # noqa: UP006
    original_messages: Optional[List[Dict[str, str]]] = None,  # noqa: UP006, UP045
    **kwargs
) -> RewardOutput:
    """
    Evaluates responses based on conversation context and history.

    Args:
        messages: List of conversation messages
        original_messages: Original context messages
        **kwargs: Additional parameters

    Returns:
        RewardOutput with score and metrics
    """
    # Ensure we have enough messages
    if len(messages) < 2:
        return RewardOutput(
            score=0.0,
            metrics={"error": MetricRewardOutput(score=0.0, reason="Insufficient conversation history")}
        )

    # Get the current user query and assistant response
    user_query = None
    for i in range(len(messages) - 2, -1, -1):
        if messages[i].get("role") == "user":
            user_query = messages[i].get("content", "")
            break

    if not user_query:
        return RewardOutput(
            score=0.0,
            metrics={"error": MetricRewardOutput(score=0.0, reason="No user query found")}
        )

    assistant_response = messages[-1].get("content", "")
    if not assistant_response or messages[-1].get("role") != "assistant":
        return RewardOutput(
            score=0.0,
            metrics={"error": MetricRewardOutput(score=0.0, reason="No assistant response found")}
        )

    # Analyze conversation history
    conversation_history = messages[:-1]
    previous_topics = extract_topics(conversation_history)
    current_topics = extract_topics([{"role": "user", "content": user_query}])

    # Initialize metrics
    metrics = {}

    # 1. Continuity: Evaluate if the response maintains conversation flow
    continuity_score = evaluate_continuity(previous_topics, current_topics, assistant_response)
    metrics["continuity"] = MetricRewardOutput(
        score=continuity_score,
        reason=f"Conversation flow continuity: {continuity_score:.2f}"
    )

    # 2. Query addressing: Check if the response directly addresses the query
    addressing_score = evaluate_addressing(user_query, assistant_response)
    metrics["query_addressing"] = MetricRewardOutput(
        score=addressing_score,
        reason=f"Query addressing: {addressing_score:.2f}"
    )

    # 3. Context utilization: Check if the response uses previous context
    context_score = evaluate_context_utilization(conversation_history, assistant_response)
    metrics["context_utilization"] = MetricRewardOutput(
        score=context_score,
        reason=f"Context utilization: {context_score:.2f}"
    )

    # Calculate final score (equal weighting for simplicity)
    final_score = (continuity_score + addressing_score + context_score) / 3.0

    return RewardOutput(score=final_score, metrics=metrics)


# Helper functions
def extract_topics(messages: List[Dict[str, str]]) -> set:  # noqa: UP006
    """Extract main topics from messages."""
    all_text = " ".join([msg.get("content", "") for msg in messages])

    # Simple keyword extraction (in a real scenario, use NLP techniques)
    # Extract words of 5+ characters as potential topic keywords
    potential_topics = set(re.findall(r'\b[a-zA-Z]{5,}\b', all_text.lower()))

    # Filter out common stop words
    stop_words = {"about", "above", "across", "after", "again", "against", "around", "because", "before", "behind", "below", "between", "could", "should", "would", "their", "please", "thanks", "think", "though", "through", "where", "which", "while", "would", "there", "these", "those", "first", "third", "three", "using", "another", "example"}  # noqa: B033
    topics = potential_topics - stop_words

    return topics


def evaluate_continuity(previous_topics: set, current_topics: set, response: str) -> float:
    """Evaluate if the response maintains conversation flow."""
    # Check for topic overlap between previous conversation and response
    response_topics = set(re.findall(r'\b[a-zA-Z]{5,}\b', response.lower()))

    # Filter out common stop words
    stop_words = {"about", "above", "across", "after", "again", "against", "around", "because", "before", "behind", "below", "between", "could", "should", "would", "their", "please", "thanks", "think", "though", "through", "where", "which", "while", "would", "there", "these", "those", "first", "third", "three", "using", "another", "example"}  # noqa: B033
    response_topics = response_topics - stop_words

    # Calculate continuity based on topic overlap
    all_previous_topics = previous_topics.union(current_topics)
    if not all_previous_topics:
        return 0.5  # Default middle score if no topics detected

    overlap = len(response_topics.intersection(all_previous_topics))
    continuity_score = min(overlap / max(len(all_previous_topics), 1) * 2, 1.0)

    return continuity_score


def evaluate_addressing(query: str, response: str) -> float:
    """Evaluate how directly the response addresses the query."""
    # Look for question words in the query
    question_words = ["what", "why", "how", "when", "where", "who", "which", "can", "could", "would", "should"]
    contains_question = any(word in query.lower().split() for word in question_words)

    if contains_question:
        # Check for direct answer patterns in response
        answer_patterns = [
            r"the answer is",
            r"to answer your question",
            r"^(yes|no)",
            r"there are",
            r"it is",
            r"that's because",
            r"the reason is"
        ]
        has_answer_pattern = any(re.search(pattern, response.lower()) for pattern in answer_patterns)

        # Check for query keyword presence in response
        query_keywords = set(re.findall(r'\b[a-zA-Z]{4,}\b', query.lower()))
        stop_words = {"what", "when", "where", "which", "about", "above", "across", "after", "again", "against", "around", "because", "before", "behind", "below", "between", "could", "should", "would", "their", "please", "thanks"}
        query_keywords = query_keywords - stop_words

        keyword_matches = sum(1 for keyword in query_keywords if keyword in response.lower())
        keyword_coverage = keyword_matches / max(len(query_keywords), 1)

        # Calculate addressing score
        addressing_score = 0.5 + (0.25 if has_answer_pattern else 0.0) + (keyword_coverage * 0.25)
        return min(addressing_score, 1.0)
    else:
        # For non-questions, just look at keyword overlap
        query_words = set(query.lower().split())
        response_words = set(response.lower().split())
        overlap = len(query_words.intersection(response_words))
        return min(overlap / max(len(query_words), 1), 1.0)


def evaluate_context_utilization(history: List[Dict[str, str]], response: str) -> float:  # noqa: UP006
    """Evaluate how well the response utilizes previous conversation context."""
    if not history:
        return 0.5  # Default if no history

    # Extract keywords from history (excluding the most recent user query)
    history_text = " ".join([msg.get("content", "") for msg in history[:-1]])
    history_keywords = set(re.findall(r'\b[a-zA-Z]{5,}\b', history_text.lower()))

    # Filter out common stop words
    stop_words = {"about", "above", "across", "after", "again", "against", "around", "because", "before", "behind", "below", "between", "could", "should", "would", "their", "please", "thanks", "think", "though", "through", "where", "which", "while", "would", "there", "these", "those", "first", "third", "three", "using", "another", "example"}  # noqa: B033
    history_keywords = history_keywords - stop_words

    if not history_keywords:
        return 0.5  # Default if no significant keywords

    # Check for history keyword presence in response
    response_lower = response.lower()
    keyword_matches = sum(1 for keyword in history_keywords if keyword in response_lower)

    # Look for explicit references to previous exchanges
    reference_phrases = [
        "as mentioned earlier",
        "as i said before",
        "as we discussed",
        "you mentioned",
        "referring to",
        "earlier you asked",
        "previously you",
        "going back to"
    ]
    has_explicit_reference = any(phrase in response_lower for phrase in reference_phrases)

    # Calculate context score
    context_score = (
        min(keyword_matches / max(len(history_keywords) * 0.3, 1), 0.7) +  # Up to 0.7 for keyword coverage
        (0.3 if has_explicit_reference else 0.0)  # 0.3 for explicit references
    )

    return min(context_score, 1.0)
