"""The worked example of docs/observability.md runs, and shows one trace from dispatch to task."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")


def test_the_example_finds_the_task_in_its_result_log_metrics_and_one_trace() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.observability"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout

    assert "result     Quote(sku='tea', total_cents=1000)" in out
    assert "status     succeeded after 1 delivery" in out
    [log] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert (log["logger"], log["outcome"], log["task"]) == (
        "taskrunner.attempts",
        "succeeded",
        "shop.quote",
    )
    assert log["duration_seconds"] >= 0.02
    assert 'taskrunner_attempts_total{outcome="succeeded",task="shop.quote"} 1.0' in out
    assert 'taskrunner_attempt_duration_seconds_count{task="shop.quote"} 1.0' in out
    assert 'taskrunner_queue_latency_seconds_count{task="shop.quote"} 1.0' in out

    spans = {
        match["name"].strip(): match.groupdict()
        for match in re.finditer(
            r"^  (?P<name>.{14}) kind=(?P<kind>\w+)\s+trace=(?P<trace>\w+) "
            r"span=(?P<span>\w+) parent=(?P<parent>\S+)$",
            out,
            re.MULTILINE,
        )
    }
    assert list(spans) == ["POST /quote", "send shop", "process shop", "price lookup"]
    assert len({span["trace"] for span in spans.values()}) == 1  # one trace, end to end
    assert spans["send shop"]["parent"] == spans["POST /quote"]["span"]
    assert spans["process shop"]["parent"] == spans["send shop"]["span"]
    assert spans["price lookup"]["parent"] == spans["process shop"]["span"]
    assert (spans["send shop"]["kind"], spans["process shop"]["kind"]) == ("PRODUCER", "CONSUMER")
