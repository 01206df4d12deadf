"""Root pytest configuration: keep nbmake (which runs notebooks/) from printing its advertisement.

nbmake 1.5 prints "Learn more about nbmake at …" from its pytest_terminal_summary whenever
--nbmake is on; its only switch is --no-summary, which would also hide the failure reports.
This wrapper turns the option off for that one hook call (collection is over by then).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_terminal_summary(config):
    nbmake = getattr(config.option, "nbmake", None)
    if nbmake:
        config.option.nbmake = False
    try:
        yield
    finally:
        if nbmake:
            config.option.nbmake = nbmake
