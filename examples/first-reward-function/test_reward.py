"""
Test script for the relevance reward function (step 4 of the seed tutorial, unchanged but for lint).
"""

import json
import os
import sys
from pathlib import Path

# Ensure the metrics directory is in the path
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__))))

from metrics.relevance.main import evaluate


def load_samples(file_path):
    """Load sample conversations from a JSONL file."""
    samples = []
    with open(file_path, "r") as f:
        for line in f:
            if line.strip():
                samples.append(json.loads(line))
    return samples


def main():
    # Load sample conversations
    samples_path = Path("samples.jsonl")
    if not samples_path.exists():
        print(f"Error: Sample file {samples_path} not found.")
        return

    samples = load_samples(samples_path)
    print(f"Loaded {len(samples)} sample conversations.")

    # Test each sample
    for i, sample in enumerate(samples):
        print(f"\nSample {i + 1}:")
        messages = sample.get("messages", [])

        # Find user and assistant messages
        user_msg = next((msg for msg in messages if msg.get("role") == "user"), None)
        assistant_msg = next((msg for msg in messages if msg.get("role") == "assistant"), None)

        if user_msg and assistant_msg:
            print(f"User: {user_msg.get('content', '')[:50]}...")
            print(f"Assistant: {assistant_msg.get('content', '')[:50]}...")

            # Evaluate the sample
            result = evaluate(messages=messages)

            # Print the results
            print(f"Overall Score: {result.score:.2f}")
            print(f"Reason: {result.reason}")
            print("Metrics:")
            for name, metric in result.metrics.items():
                print(f"  {name}: {metric.score:.2f} - {metric.reason}")
        else:
            print("Invalid sample: Missing user or assistant message.")


if __name__ == "__main__":
    main()
