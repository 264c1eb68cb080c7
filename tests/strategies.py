"""Shared Hypothesis strategies and settings."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Characters that break naive key schemes: separators, hash-tag braces, glob and percent
# syntax, whitespace, NUL, and non-ASCII (multi-byte in UTF-8, so bytes != characters).
HOSTILE_CHARS = ":{}*?[]$%\\|\n\r\t\x00 ~-_.é中😀"

hostile_text = st.text(alphabet=st.sampled_from(HOSTILE_CHARS), min_size=0, max_size=8) | st.text(
    max_size=6
)


def sharing_fixtures(max_examples: int) -> settings:
    """Settings for a test whose function-scoped fixtures (a client, a prefix) serve all of its
    examples: Hypothesis would otherwise refuse them, as they are not reset between examples."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
