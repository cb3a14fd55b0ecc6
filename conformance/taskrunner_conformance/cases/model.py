"""The model-based test: a hypothesis state machine against the reference model (P40)."""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis.stateful import run_state_machine_as_test

from ..scenario import ConformanceBase
from ..settings import seed
from ..stateful import QueueMachine, machine_settings, machine_time_mode

__all__ = ["ModelCases"]


class ModelCases(ConformanceBase):
    """P40."""

    def test_random_operations_agree_with_the_reference_model(self) -> None:
        """Add, receive, reclaim, heartbeat, ack, release, dead-letter, crash and time passing.

        Every result must be one the contract allows, as judged by a model written
        from the contract alone; `len` and the dead count must match it after every
        step. Needs simulated time (a harness ``clock``) or an ``age_lease`` hook.
        """
        if machine_time_mode(self.make_harness()) is None:
            pytest.skip("harness has neither a clock nor an age_lease hook")
        make_harness = self.make_harness

        class BoundMachine(QueueMachine):
            def __init__(self) -> None:
                super().__init__(make_harness)

        chosen = seed()
        machine = BoundMachine if chosen is None else hypothesis.seed(chosen)(BoundMachine)
        run_state_machine_as_test(machine, settings=machine_settings())

    test_random_operations_agree_with_the_reference_model.conformance_properties = ("P40",)  # type: ignore[attr-defined]
