"""pytest hooks only (helpers live in tests/helpers.py)."""
from __future__ import annotations


def pytest_collection_modifyitems(session, config, items):
    """The slow end-to-end tests run first. Under `-n 2` a worker takes the next test when it finishes one, so
    long tests started last would leave the other worker idle at the end; started first, the short ones fill
    the gaps. The order inside each group stays as collected."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
