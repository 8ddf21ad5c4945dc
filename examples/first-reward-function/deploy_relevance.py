# deploy_relevance.py: step 8 of the seed tutorial, with `pytest_reward` in place of `reward_kit` in the import.
from pathlib import Path

from pytest_reward.evaluation import create_evaluation


def main():
    """Deploy the relevance evaluator (to ini reward_deploy_target, else dir:.reward/deploy)."""
    print("Deploying relevance evaluator...")

    try:
        # Deploy the evaluator
        metrics_path = Path("metrics/relevance").absolute()

        if not metrics_path.exists():
            print(f"Error: Metrics folder {metrics_path} not found.")
            return

        result = create_evaluation(
            evaluator_id="relevance-evaluator",
            metric_folders=[f"relevance={metrics_path}"],
            display_name="Response Relevance Evaluator",
            description="Evaluates how well a response addresses the user's query",
            force=True,  # Update if it already exists
        )

        print(f"Successfully deployed evaluator: {result['name']}")
        print(f"Use this ID for training jobs: {result['name'].split('/')[-1]}")

    except Exception as e:
        print(f"Error deploying evaluator: {e!s}")
        print("Make sure your API credentials are set up correctly.")


if __name__ == "__main__":
    main()
