#!/usr/bin/env bash
# The reward gate of a CI pipeline, for any CI system: the same commands as github-workflow.yml's steps.
#
#   examples/ci/reward-ci.sh main           on the main branch: test, store the scores as the baseline, and deploy
#                                           the reward functions when the run is green
#   examples/ci/reward-ci.sh pull-request   on a branch: test, compare with the stored baseline, fail on a regression
#
# Run it in the project's root (where its pyproject.toml / pytest.ini names the samples, e.g.
# reward_samples_glob = ["samples.jsonl"]). Both steps write reward-report/ (report.html, summary.json,
# results.jsonl: publish it as an artifact) and junit.xml; with GITHUB_STEP_SUMMARY set, a Markdown table is
# appended to that file. The baseline lives in .reward/ (ini reward_storage): keep that directory between runs
# with your CI's cache, saved by main's runs and restored before a pull request's. The deploy target is
# $REWARD_DEPLOY_TARGET (dir:PATH, http(s)://URL with $REWARD_DEPLOY_TOKEN, fireworks:ID), by default
# dir:.reward/deploy.
set -euo pipefail

case "${1:-}" in
main)
    pytest --reward-save --reward-report reward-report --junitxml junit.xml --reward-deploy="${REWARD_DEPLOY_TARGET:-dir:.reward/deploy}"
    ;;
pull-request)
    pytest --reward-compare --reward-compare-fail mean:0.02,pass_rate:0.05,sample:0.3 --reward-report reward-report --junitxml junit.xml
    ;;
*)
    echo "usage: $0 main|pull-request" >&2
    exit 2
    ;;
esac
