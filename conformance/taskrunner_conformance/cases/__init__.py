"""The conformance cases, one mixin class per group of properties.

`taskrunner_conformance.QueueConformance` combines them all; a backend's test module
may also subclass a single mixin (with `taskrunner_conformance.scenario.ConformanceBase`
providing the harness) to run one group.
"""
