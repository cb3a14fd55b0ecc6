"""Developer sessions: ``nox -s tests lint typecheck`` is the full check."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typecheck"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def install(session: nox.Session, *groups: str, extras: str = "") -> None:
    session.install("-e", f".{extras}", *nox.project.dependency_groups(PYPROJECT, *groups))


def processes(posargs: list[str]) -> list[str]:
    """pytest-xdist options: ``TASKRUNNER_TEST_PROCESSES`` processes (default twice the
    cores: most tests wait on servers and timers), unless the arguments choose (``-n 0``
    runs in one process, for a debugger). ``loadgroup`` keeps each group of tests that
    shares a costly server (the Redis Cluster) in one process."""
    if any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in posargs):
        return []
    count = os.environ.get("TASKRUNNER_TEST_PROCESSES") or str(2 * (os.cpu_count() or 1))
    return ["-n", count, "--dist", "loadgroup"]


@nox.session
def tests(session: nox.Session) -> None:
    """Every test. Redis tests use TASKRUNNER_TEST_REDIS_URL or spawn a throwaway server."""
    install(session, "test", extras="[conformance,prometheus,postgres,dashboard]")
    session.run("pytest", *processes(session.posargs), *session.posargs)


@nox.session
def redis(session: nox.Session) -> None:
    """Only the tests that need a Redis-compatible server (TASKRUNNER_TEST_SERVER=valkey|redis)."""
    install(session, "test", extras="[conformance,prometheus,postgres,dashboard]")
    session.run("pytest", "-m", "redis", *processes(session.posargs), *session.posargs)


@nox.session
def postgres(session: nox.Session) -> None:
    """Only the tests that need PostgreSQL (TASKRUNNER_TEST_POSTGRES_URL, or a throwaway server)."""
    install(session, "test", extras="[conformance,prometheus,postgres,dashboard]")
    session.run("pytest", "-m", "postgres", *processes(session.posargs), *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint rules and formatting) and import-linter (the layering in pyproject.toml)."""
    install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, conformance, tests, bench and examples."""
    install(session, "typecheck", extras="[conformance,prometheus,postgres,dashboard]")
    session.run("mypy")


@nox.session
def mutation(session: nox.Session) -> None:
    """Mutation testing of the conformance suite; writes docs/mutation-report.md.

    mutmut mutates every module of the memory backend's package and the SQLite example
    and runs the suite on each mutant (tests/mutation/run.py; arguments after -- go
    there: --target, --jobs, --report-only, --no-run). Fails when a survivor is not
    explained in tests/mutation/equivalent.toml. Not a default session: 20 to 30 minutes
    on 2 cores (the memory package, 1,183 mutants, 8-10 min; the SQLite example, on real
    time, 13 min alone and 21 min with the memory run beside it).
    """
    install(session, "mutation", extras="[conformance]")
    session.run(
        "nice", "-n", "10", "python", "-m", "tests.mutation.run", *session.posargs, external=True
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Throughput benchmark against raw redis-py or psycopg (bench/throughput.py)."""
    install(session, "test", extras="[postgres]")
    session.run("python", "bench/throughput.py", *session.posargs)


@nox.session(name="bench-dispatch")
def bench_dispatch(session: nox.Session) -> None:
    """SyncProducer.dispatch vs raw redis-py XADD, 1 and 8 threads (bench/dispatch.py)."""
    install(session, "test")
    session.run("python", "bench/dispatch.py", *session.posargs)


@nox.session(name="bench-scheduling")
def bench_scheduling(session: nox.Session) -> None:
    """Delayed burst and unique-key cost on Redis (bench/scheduling.py); not a default session."""
    install(session, "test")
    session.run("python", "bench/scheduling.py", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """Chaos soak of the Redis backend (tests/soak); not in the default sessions.

    Four worker processes SIGKILLed (or SIGTERMed) every few seconds, a private
    redis-server (AOF, appendfsync always) SIGKILLed and restarted every 15-30 s, 20,000
    jobs; then a Jepsen-style check of the completion log: exits non-zero when a job was
    lost, a message ran twice at once without a long outage to explain it, or a lease
    loss was counted that did not happen. The default run takes about 7 minutes on a
    2-core machine. Options go to the driver: ``nox -s soak -- --jobs 2000 --keep``
    (``--help`` lists them).
    """
    install(session, "test")
    session.run("python", "-m", "tests.soak", *session.posargs)


@nox.session(name="soak-outbox")
def soak_outbox(session: nox.Session) -> None:
    """Chaos soak of the transactional outbox (tests/soak/outbox.py); not a default session.

    Three ``taskrunner relay`` processes, one SIGKILLed every 1-4 s; a private Redis (AOF,
    appendfsync always) SIGKILLed and restarted every 6-12 s; 30,000 rows dispatched in
    transactions of 1-20, a tenth rolled back. Exits non-zero when a committed row is
    lost or duplicated, or a rolled-back one delivered. About 1 minute on 2 cores.
    Options: ``nox -s soak-outbox -- --rows 100000 --postgres URL``.
    """
    install(session, "test", extras="[postgres]")
    session.run("python", "-m", "tests.soak.outbox", *session.posargs)


@nox.session(name="soak-flow")
def soak_flow(session: nox.Session) -> None:
    """Chaos check of per-key concurrency limits (tests/soak/flow.py); not a default session.

    3,000 jobs at 50/s over 20 keys (4 hot) with ``concurrency_limit=2`` per key; 4
    worker processes, one SIGKILLed (a fifth SIGTERMed) every 2-5 s; a private Redis
    (AOF, appendfsync always) SIGKILLed and restarted every 10-20 s, outages inside
    ``lease - heartbeat``; lease 3 s. Exits non-zero when a key ran (or held) more than
    2 attempts at once, a job was lost or dead-lettered, the soak checker found a
    violation, or a slot or waiting message was left. About 100 s on 2 cores.
    Options: ``nox -s soak-flow -- --jobs 6000 --keep``.
    """
    install(session, "test")
    session.run("python", "-m", "tests.soak.flow", *session.posargs)


@nox.session(name="soak-flow-rate")
def soak_flow_rate(session: nox.Session) -> None:
    """Rate-limit accuracy (tests/soak/flow_rate.py); not a default session.

    4 worker processes on a backlog of a ``rate_limit="100/s"`` task, 60 s with the
    default burst and 60 s with ``rate_burst=10``: completions/s must be within 5 % of
    100 and no 1-second window may hold more than 100 + burst. About 2.5 minutes.
    Options: ``nox -s soak-flow-rate -- --seconds 20 --bursts 10``.
    """
    install(session, "test")
    session.run("python", "-m", "tests.soak.flow_rate", *session.posargs)


@nox.session(name="bench-flow")
def bench_flow(session: nox.Session) -> None:
    """Throughput with flow limits that do not bind, against none (bench/flow.py).

    Not a default session; at most about 90 s. Prints each ratio, its goal and ok or
    MISSED; exits non-zero when one is missed. Options: ``nox -s bench-flow -- --runs 1``.
    """
    install(session, "test")
    session.run("python", "bench/flow.py", *session.posargs)


@nox.session(name="bench-outbox")
def bench_outbox(session: nox.Session) -> None:
    """Outbox relay throughput and commit-to-stream latency (bench/outbox.py)."""
    install(session, "test", extras="[postgres]")
    session.run("python", "bench/outbox.py", *session.posargs)


@nox.session(name="bench-flow-fairness")
def bench_flow_fairness(session: nox.Session) -> None:
    """Small keys behind one key's backlog, with and without turns (bench/flow_fairness.py).

    Not a default session; a few seconds on memory:// (the default), under a minute on
    Redis or PostgreSQL: ``nox -s bench-flow-fairness -- redis://127.0.0.1:6379/0``.
    """
    install(session, "test", extras="[postgres]")
    session.run("python", "bench/flow_fairness.py", *session.posargs)


@nox.session(name="tuning-sim")
def tuning_sim(session: nox.Session) -> None:
    """Tuning mode under noise over 20 seeds (bench/tuning_sim.py); about 70 s.

    Not a default session: the test run covers 5 seeds. Arguments go to the script
    (--seeds, --svg; the default rewrites docs/images/tuning-noise.svg from seed 0;
    --bound: the optimal policy of a model of the steady phase, for comparison;
    --dwell and --load: the rejected minimum-dwell experiment and heavier loads;
    --estimator flow and --relay: the rejected conservation estimate and relay).
    """
    install(session, "test")
    session.run("python", "bench/tuning_sim.py", "--seeds", "20", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site with its API reference, built strictly into a temporary dir."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "docs"))
    site = session.create_tmp()
    session.run("mkdocs", "build", "--strict", "--site-dir", f"{site}/site", *session.posargs)
