"""The test class the command-line path collects; the harness comes from the runner.

Not for import by users: subclass `taskrunner_conformance.QueueConformance` instead.
Collected by `taskrunner_conformance.runner.run`, or by hand with
``TASKRUNNER_CONFORMANCE_HARNESS=pkg.mod:factory pytest --pyargs
taskrunner_conformance._cli_suite``.
"""

from __future__ import annotations

import os

import pytest

from .harness import Harness, HarnessFactory, load_harness_factory
from .settings import HARNESS_ENV
from .suite import QueueConformance

__all__ = ["HARNESS_PLUGIN_NAME", "HarnessSource", "TestQueueConformance"]

HARNESS_PLUGIN_NAME = "taskrunner-conformance-harness"


class HarnessSource:
    """A pytest plugin object that only carries the harness factory to the test class."""

    def __init__(self, factory: HarnessFactory) -> None:
        self.factory = factory
        # pytest registers a plugin object under its __name__, if it has one.
        self.__name__ = HARNESS_PLUGIN_NAME


class TestQueueConformance(QueueConformance):
    """The suite, against the harness the runner (or the environment) names."""

    _factory: HarnessFactory | None = None

    @pytest.fixture(autouse=True)
    def _bind_harness(self, request: pytest.FixtureRequest) -> None:
        source = request.config.pluginmanager.get_plugin(HARNESS_PLUGIN_NAME)
        if isinstance(source, HarnessSource):
            self._factory = source.factory
            return
        spec = os.environ.get(HARNESS_ENV, "")
        if not spec:
            pytest.fail(
                "no harness: run `python -m taskrunner_conformance MODULE:FACTORY` "
                f"or set {HARNESS_ENV}"
            )
        self._factory = load_harness_factory(spec)

    def make_harness(self) -> Harness:
        """A fresh harness from the bound factory."""
        assert self._factory is not None, "the harness fixture did not run"
        return self._factory()
