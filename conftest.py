"""Root conftest: test-suite settings shared by every test directory."""

import os

from hypothesis import HealthCheck, settings

# Property tests: no deadline (shared 2-core CI machines), fixed database-less profile for reproducibility.
settings.register_profile(
    "ci", deadline=None, database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The example projects are run by tests through pytester, never collected directly from the repo root.
collect_ignore = ["examples", "bench"]
