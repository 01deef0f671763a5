"""Human time (issue 17): seconds said in the largest unit they reach, singular and plural right."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexum.core.durations import human_age, human_duration

MINUTE, HOUR, DAY, YEAR = 60, 3600, 86400, 365 * 86400


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 seconds"),
        (0.4, "0 seconds"),
        (0.5, "1 second"),
        (1, "1 second"),
        (2, "2 seconds"),
        (59, "59 seconds"),
        (59.49, "59 seconds"),
        (59.5, "1 minute"),  # rounds up into the next unit: never "60 seconds"
        (MINUTE, "1 minute"),
        (MINUTE + 29, "1 minute"),
        (MINUTE + 30, "2 minutes"),
        (HOUR - 31, "59 minutes"),
        (HOUR - 30, "1 hour"),
        (HOUR, "1 hour"),
        (2 * HOUR, "2 hours"),
        (DAY - 1, "1 day"),
        (DAY - HOUR // 2 - 1, "23 hours"),
        (DAY, "1 day"),
        (1.5 * DAY, "2 days"),
        (7 * DAY, "7 days"),
        (30 * DAY, "30 days"),  # a TTL reads as it was set, not "1 month"
        (364 * DAY, "364 days"),
        (364.5 * DAY, "1 year"),
        (YEAR, "1 year"),
        (1.49 * YEAR, "1 year"),
        (1.5 * YEAR, "2 years"),
        (91204813, "3 years"),  # the "observed 91204813s ago"
        (100 * YEAR, "100 years"),
    ],
)
def test_a_duration_is_said_in_the_largest_unit_it_reaches(seconds, text):
    assert human_duration(seconds) == text


def test_an_age_says_ago():
    assert human_age(91204813) == "3 years ago"
    assert human_age(1) == "1 second ago"


@pytest.mark.parametrize("seconds", [-1, -0.1, math.inf, math.nan, True, "60", None])
def test_a_negative_or_non_numeric_duration_is_refused(seconds):
    with pytest.raises(ValueError):
        human_duration(seconds)


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_every_duration_has_one_amount_and_a_unit_that_agrees_with_it(seconds):
    text = human_duration(seconds)
    amount, unit = text.split(" ")
    assert int(amount) >= 0 and (unit.endswith("s") == (int(amount) != 1))
    assert human_duration(seconds) == text  # deterministic
