"""`QueueConformance`: every case of the suite in one class to subclass."""

from __future__ import annotations

from .cases.acks import AckCases
from .cases.boundaries import BoundaryCases
from .cases.concurrency import ConcurrencyCases
from .cases.delivery import DeliveryCases
from .cases.leases import LeaseCases
from .cases.lifecycle import LifecycleCases
from .cases.model import ModelCases
from .cases.outages import OutageCases
from .cases.poison import PoisonCases
from .cases.registry import RegistryCases

__all__ = ["QueueConformance"]


class QueueConformance(
    DeliveryCases,
    AckCases,
    LeaseCases,
    LifecycleCases,
    PoisonCases,
    ConcurrencyCases,
    OutageCases,
    RegistryCases,
    ModelCases,
    BoundaryCases,
):
    """The whole conformance suite; subclass it in a ``Test*`` class and supply a harness.

    Example::

        class TestMyQueue(QueueConformance):
            def make_harness(self) -> Harness:
                return MyHarness()

    or, for a backend on real time with no hooks::

        class TestMyQueue(QueueConformance):
            async def open_queue(self, namespace: str) -> Queue:
                return await MyQueue.connect(prefix=namespace)

    Each test is a plain synchronous method that runs its scenario with
    `asyncio.run`, so no pytest asyncio plugin is needed. Tests carry the ids of the
    properties they check in ``conformance_properties``; run pytest with
    ``-p taskrunner_conformance.report`` for the per-property report.
    """
