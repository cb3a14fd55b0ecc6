"""taskrunner: an asyncio task queue with leases, heartbeats and pluggable backends.

Define tasks on an `App`, dispatch them with a `Producer`, run them with a `Runner`;
`open_queue` opens a backend by URL (``memory://``, ``redis://…``)::

    app = taskrunner.App("emails")

    @app.task(max_retries=3)
    async def send_email(email: Email) -> None: ...

    async with taskrunner.open_queue("memory://", app.queue) as queue:
        await taskrunner.Producer(queue, app).dispatch(send_email, Email(to="ada@example.com"))
        await taskrunner.Runner(queue, app).run(burst=True)

Delayed and unique dispatch, cancellation and periodic schedules (``app.schedule``,
fired once per instant by an elected leader among the workers) are described in
docs/scheduling.md; `taskrunner.leader` is the election as a building block.
"""

from taskrunner.app import App, Task
from taskrunner.attempts import Attempt, AttemptObserver, Outcome
from taskrunner.backends import DEFAULT_URL, connect, known_schemes, open_queue
from taskrunner.clock import Clock, SystemClock
from taskrunner.config import RunnerConfig, TuningConfig
from taskrunner.context import TaskContext, current_task
from taskrunner.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    DecodeError,
    MessageError,
    PayloadTooLargeError,
    PayloadValidationError,
    QueueClosedError,
    TaskFailedError,
    TaskrunnerError,
    TaskTimeoutError,
    UnknownTaskError,
    UnsupportedFeatureError,
    UnsupportedServerError,
)
from taskrunner.failure import FailedTaskHandler, TaskFailure
from taskrunner.leader import LeaderElector
from taskrunner.limits import FlowKeyError
from taskrunner.messages import Envelope
from taskrunner.producer import Dispatched, DispatchedList, Producer
from taskrunner.queue import (
    Added,
    AddRequest,
    Capabilities,
    ConsumerCleanup,
    ConsumerStats,
    DeadLetter,
    Delivery,
    FireRecord,
    Flow,
    LeaderLease,
    Leadership,
    MessageLookup,
    MessageState,
    Queue,
    QueueAdmin,
    QueueStats,
    Receipt,
    ResultStore,
    ResultWrite,
    Scheduling,
    WorkerInfo,
    WorkerRegistry,
)
from taskrunner.redaction import mask_url
from taskrunner.results import TaskState, TaskStatus
from taskrunner.runner import Runner
from taskrunner.schedules import Schedule
from taskrunner.stats import RunnerStats, TaskStats
from taskrunner.sync_producer import SyncProducer

__all__ = [
    "DEFAULT_URL",
    "AddRequest",
    "Added",
    "App",
    "Attempt",
    "AttemptObserver",
    "BackendError",
    "BackendUnavailableError",
    "Capabilities",
    "Clock",
    "ConfigurationError",
    "ConsumerCleanup",
    "ConsumerStats",
    "DeadLetter",
    "DecodeError",
    "Delivery",
    "Dispatched",
    "DispatchedList",
    "Envelope",
    "FailedTaskHandler",
    "FireRecord",
    "Flow",
    "FlowKeyError",
    "LeaderElector",
    "LeaderLease",
    "Leadership",
    "MessageError",
    "MessageLookup",
    "MessageState",
    "Outcome",
    "PayloadTooLargeError",
    "PayloadValidationError",
    "Producer",
    "Queue",
    "QueueAdmin",
    "QueueClosedError",
    "QueueStats",
    "Receipt",
    "ResultStore",
    "ResultWrite",
    "Runner",
    "RunnerConfig",
    "RunnerStats",
    "Schedule",
    "Scheduling",
    "SyncProducer",
    "SystemClock",
    "Task",
    "TaskContext",
    "TaskFailedError",
    "TaskFailure",
    "TaskState",
    "TaskStats",
    "TaskStatus",
    "TaskTimeoutError",
    "TaskrunnerError",
    "TuningConfig",
    "UnknownTaskError",
    "UnsupportedFeatureError",
    "UnsupportedServerError",
    "WorkerInfo",
    "WorkerRegistry",
    "__version__",
    "connect",
    "current_task",
    "known_schemes",
    "mask_url",
    "open_queue",
]

# The one place the version is kept: pyproject.toml reads it ([tool.hatch.version]).
__version__ = "0.1.0"
