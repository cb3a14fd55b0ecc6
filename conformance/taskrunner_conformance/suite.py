"""`QueueConformance`: every case of the suite in one class to subclass."""

from __future__ import annotations

from .cases.acks import AckCases
from .cases.admin import AdminCases
from .cases.arguments import ArgumentCases
from .cases.batches import BatchCases
from .cases.boundaries import BoundaryCases
from .cases.browse import BrowseCases
from .cases.cleanup import CleanupCases
from .cases.closed_handles import ClosedHandleCases
from .cases.concurrency import ConcurrencyCases
from .cases.delivery import DeliveryCases
from .cases.fencing import FencingCases
from .cases.flow import FlowCases
from .cases.leadership import LeadershipCases
from .cases.leases import LeaseCases
from .cases.lifecycle import LifecycleCases
from .cases.lookup import LookupCases
from .cases.model import ModelCases
from .cases.ordering import OrderingCases
from .cases.outages import OutageCases
from .cases.poison import PoisonCases
from .cases.priorities import PriorityCases
from .cases.reclaim_progress import ReclaimProgressCases
from .cases.registry import RegistryCases
from .cases.results import ClosedWhileWaitingCases, ResultCases
from .cases.scheduling import SchedulingCases
from .cases.shapes import ShapeCases
from .cases.stats import StatsCases

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
    CleanupCases,
    ModelCases,
    FencingCases,
    ArgumentCases,
    ClosedHandleCases,
    ReclaimProgressCases,
    ShapeCases,
    OrderingCases,
    BatchCases,
    AdminCases,
    StatsCases,
    BoundaryCases,
    SchedulingCases,
    LeadershipCases,
    ResultCases,
    ClosedWhileWaitingCases,
    LookupCases,
    BrowseCases,
    FlowCases,
    PriorityCases,
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
