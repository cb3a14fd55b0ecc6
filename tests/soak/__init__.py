"""The chaos soak of the Redis backend (``nox -s soak``; not part of the test run).

`driver` runs worker processes (`worker`, tasks in `app`) against a private Redis with
AOF, kills both over and over, and judges the completion log (`records`) with
`checker`. Only `test_checker.py` (the checker on synthetic logs) runs with the tests.
"""
