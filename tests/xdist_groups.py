"""How the suite's tests are grouped for pytest-xdist's ``--dist loadgroup`` (the Makefile's
``test``). Kept apart from conftest.py so that a test can run a scratch suite with exactly
this grouping (tests/test_xdist_groups.py): when grouping silently stops working, as it
did with pytest 9.2's node ids, every worker builds every module fixture again and the
suite costs minutes more, with every test still green."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use a module-scoped fixture share the worker that builds it once (a
    corpus migrated four times, ten programs run on the shim), instead of each worker
    building it again. The real-model tests are not grouped: each starts a server of its
    own (no fixture shares one), so a group would only queue them on one worker, the
    longest queue of the run.

    ``tryfirst``: xdist's worker turns the group marks into node ids in this same hook, and
    its plugin is registered after the conftest, so it would run first and see none.
    """
    for item in items:
        fixtures = item._fixtureinfo.name2fixturedefs.values()
        if any(d.scope == "module" for defs in fixtures for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
