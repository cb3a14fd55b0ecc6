"""The conformance suite for `taskrunner.queue.Queue` backends, shipped with taskrunner.

Two ways in:

1. **Subclass** `QueueConformance` in your backend's tests and supply a harness
   (see `taskrunner_conformance.harness`)::

       from taskrunner_conformance import BaseHarness, QueueConformance

       class MyHarness(BaseHarness):
           async def open_queue(self, namespace):
               return await MyQueue.connect(prefix=namespace, lease_seconds=self.lease_seconds)

       class TestMyQueue(QueueConformance):
           def make_harness(self):
               return MyHarness()

   Add ``-p taskrunner_conformance.report`` to pytest's options for the report.

2. **No code**: ``python -m taskrunner_conformance PACKAGE.MODULE:FACTORY`` runs the
   suite against a harness factory or an ``async def factory(namespace) -> Queue``,
   prints the conformance report, and exits 0 only when every applicable property
   passed (`taskrunner_conformance.runner`).

The properties are numbered in `taskrunner_conformance.properties`; every sentence of
the `Queue` contract, and of the optional `Scheduling`, `Leadership`, `ResultStore`,
`MessageLookup` and `MessageBrowser` parts, has a test whose name reads the same. Install with
``pip install 'taskrunner-queue[conformance]'`` (pytest and hypothesis).

Versioning: `SUITE_VERSION` changes when tests are added; new required tests arrive
only in minor releases of taskrunner, so pin taskrunner in your CI to avoid surprises.
The suite tests one contract, `TESTED_CONTRACT_VERSION` (the installed
`taskrunner.queue.CONTRACT_VERSION`): a backend declares the version it implements as
``contract_version`` on its queue class; a major the suite does not test fails the
run, a missing declaration is named in the report (docs/writing-a-backend.md, §9).
"""

from __future__ import annotations

from taskrunner.queue import Capabilities

from .harness import (
    AgesLeases,
    BaseHarness,
    CrashesBackend,
    Harness,
    HarnessFactory,
    InjectsRaw,
    MeasuresStorage,
    QueueFactory,
    QueueFactoryHarness,
    ReadsDeadLetters,
    RemovesPayloads,
    RestartsBackend,
    StopsBackend,
    load_harness_factory,
)
from .history import (
    History,
    HistoryReport,
    LeaseViolation,
    QueueCheck,
    RecordingQueue,
    check_history,
)
from .model import ReferenceModel
from .properties import PROPERTIES, Property
from .report import (
    SUITE_VERSION,
    TESTED_CONTRACT_VERSION,
    ConformanceReport,
    ConformanceReporter,
    ContractCheck,
    check_contract,
)
from .runner import main, run
from .scenario import ConformanceBase, Scenario, conformance
from .settings import effort, time_scale
from .stateful import QueueMachine, machine_settings
from .suite import QueueConformance

__all__ = [
    "PROPERTIES",
    "SUITE_VERSION",
    "TESTED_CONTRACT_VERSION",
    "AgesLeases",
    "BaseHarness",
    "Capabilities",
    "ConformanceBase",
    "ConformanceReport",
    "ConformanceReporter",
    "ContractCheck",
    "CrashesBackend",
    "Harness",
    "HarnessFactory",
    "History",
    "HistoryReport",
    "InjectsRaw",
    "LeaseViolation",
    "MeasuresStorage",
    "Property",
    "QueueCheck",
    "QueueConformance",
    "QueueFactory",
    "QueueFactoryHarness",
    "QueueMachine",
    "ReadsDeadLetters",
    "RecordingQueue",
    "ReferenceModel",
    "RemovesPayloads",
    "RestartsBackend",
    "Scenario",
    "StopsBackend",
    "check_contract",
    "check_history",
    "conformance",
    "effort",
    "load_harness_factory",
    "machine_settings",
    "main",
    "run",
    "time_scale",
]
