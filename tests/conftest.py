"""pytest hooks only (helpers live in tests/helpers.py)."""
from __future__ import annotations


def pytest_configure(config):
    """Under `-n 2`, hand each worker one test at a time (pytest-xdist's default sends each a quarter of the
    collection up front, consecutive tests: the slow ones, sorted first, would all go to one worker)."""
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(session, config, items):
    """The slow end-to-end tests run first: a worker that finishes one takes the next test, so the short ones
    fill the gaps, and the run does not end on one long test with the other worker idle. The order inside each
    group stays as collected."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
