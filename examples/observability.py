"""The worked example of docs/observability.md: one task, from dispatch to result, metric and trace.

Run: ``python -m examples.observability`` from a checkout, with the ``prometheus`` and
``otel`` extras and the OpenTelemetry SDK installed
(``pip install '.[prometheus,otel]' opentelemetry-sdk``). It uses the in-memory
backend, so nothing else is needed; with ``--url redis://...`` it runs on Redis.

It dispatches one task inside a span of its own (as a web request handler would),
waits for the result, asks for the message's status, then shows the lines of the
worker's ``/metrics`` page about that task and the spans the SDK recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import urllib.request

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import taskrunner
from taskrunner.logs import configure_logging
from taskrunner.metrics import start_metrics_server


class Order(msgspec.Struct):
    sku: str
    quantity: int


class Quote(msgspec.Struct):
    sku: str
    total_cents: int


app = taskrunner.App("shop")


@app.task(name="shop.quote", store_result=True, result_ttl=600)
async def quote(order: Order) -> Quote:
    """Prices an order; its return value is stored for `Producer.result`."""
    with trace.get_tracer("shop").start_as_current_span("price lookup"):
        await asyncio.sleep(0.02)
    return Quote(sku=order.sku, total_cents=order.quantity * 250)


def _metric_lines(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    wanted = (
        'taskrunner_attempts_total{outcome="succeeded"',
        "taskrunner_attempt_duration_seconds_count",
        "taskrunner_attempt_duration_seconds_sum",
        'taskrunner_attempt_duration_seconds_bucket{le="0.025"',
        'taskrunner_attempt_duration_seconds_bucket{le="0.05"',
        "taskrunner_queue_latency_seconds_count",
    )
    return [
        line
        for line in text.splitlines()
        if 'task="shop.quote"' in line and line.startswith(wanted)
    ]


def _describe(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    parent = "-" if span.parent is None else f"{span.parent.span_id:016x}"
    return (
        f"{span.name:<14} kind={span.kind.name:<8} trace={context.trace_id:032x} "
        f"span={context.span_id:016x} parent={parent}"
    )


async def main(url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # before the Runner is built
    # JSON lines on stdout; the per-attempt line of a success is at DEBUG.
    configure_logging("warning", "json", stream=sys.stdout)
    logging.getLogger("taskrunner.attempts").setLevel(logging.DEBUG)

    async with taskrunner.open_queue(url, app.queue) as queue:
        runner = taskrunner.Runner(queue, app, taskrunner.RunnerConfig(num_workers=4))
        server = start_metrics_server(runner, port=0)
        worker = asyncio.create_task(runner.run())
        try:
            await runner.wait_ready()
            producer = taskrunner.Producer(queue, app)
            with trace.get_tracer("shop").start_as_current_span("POST /quote"):
                message_id = await producer.dispatch(quote, Order(sku="tea", quantity=4))
            print("dispatched", message_id)
            print("result    ", await producer.result(message_id, timeout=30))
            status = await producer.status(message_id)
            print("status    ", status.state, "after", status.delivery_count, "delivery")
            print()
            print("metrics (the lines about shop.quote):")
            # From a thread: a scrape is answered on this event loop, which must keep running.
            for line in await asyncio.to_thread(_metric_lines, server.port):
                print(" ", line.replace(f'queue="{app.queue}",', ""))
        finally:
            runner.stop()
            await worker
            server.close()
    print()
    print("spans (oldest first):")
    for span in sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0):
        print(" ", _describe(span))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="memory://observability-example")
    asyncio.run(main(parser.parse_args().url))
