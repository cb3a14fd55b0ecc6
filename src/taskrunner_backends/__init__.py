"""Backends shipped with taskrunner.

* `taskrunner_backends.memory` — ``memory://``: in-process, for tests and the embedded default.
* `taskrunner_backends.redis` — ``redis://``, ``rediss://``, ``unix://``: Redis Streams.

Nothing is imported eagerly; `taskrunner` loads a backend by URL scheme when it is used.
"""
