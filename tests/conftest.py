"""Shared test settings."""

import os

from hypothesis import HealthCheck, settings

# Property tests are derandomised so that CI and a learner's machine try the same examples.
settings.register_profile(
    "course", derandomize=True, deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))
