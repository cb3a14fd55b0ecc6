"""taskrunner: an asyncio task queue with leases, heartbeats and pluggable backends.

Define tasks on an `App`, dispatch them with a `Producer`, run them with a `Runner`;
`open_queue` opens a backend by URL (``memory://``, ``redis://…``)::

    app = taskrunner.App("emails")

    @app.task(max_retries=3)
    async def send_email(email: Email) -> None: ...

    async with taskrunner.open_queue("memory://", app.queue) as queue:
        await taskrunner.Producer(queue, app).dispatch(send_email, Email(to="ada@example.com"))
        await taskrunner.Runner(queue, app).run(burst=True)
"""

from taskrunner.app import App, Task
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
    TaskrunnerError,
    TaskTimeoutError,
    UnknownTaskError,
    UnsupportedServerError,
)
from taskrunner.failure import FailedTaskHandler, TaskFailure
from taskrunner.messages import Envelope
from taskrunner.producer import Producer
from taskrunner.queue import (
    Capabilities,
    ConsumerCleanup,
    ConsumerStats,
    DeadLetter,
    Delivery,
    Queue,
    QueueAdmin,
    QueueStats,
    Receipt,
    WorkerInfo,
    WorkerRegistry,
)
from taskrunner.redaction import mask_url
from taskrunner.runner import Runner
from taskrunner.stats import RunnerStats, TaskStats

__all__ = [
    "DEFAULT_URL",
    "App",
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
    "Envelope",
    "FailedTaskHandler",
    "MessageError",
    "PayloadTooLargeError",
    "PayloadValidationError",
    "Producer",
    "Queue",
    "QueueAdmin",
    "QueueClosedError",
    "QueueStats",
    "Receipt",
    "Runner",
    "RunnerConfig",
    "RunnerStats",
    "SystemClock",
    "Task",
    "TaskContext",
    "TaskFailure",
    "TaskStats",
    "TaskTimeoutError",
    "TaskrunnerError",
    "TuningConfig",
    "UnknownTaskError",
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

__version__ = "0.1.0"
