"""The chaos soak of the Redis backend (``nox -s soak``; not part of the test run).

`driver` runs worker processes (`worker`, tasks in `app`) against a private Redis with
AOF, kills both over and over, and judges the completion log (`records`) with
`checker`. `flow` runs the same driver on a task with per-key concurrency limits
(``nox -s soak-flow``), `flow_rate` measures a rate limit's accuracy (``nox -s
soak-flow-rate``). Only `test_checker.py` and `test_flow.py` (the judges on synthetic
logs) run with the tests.
"""
