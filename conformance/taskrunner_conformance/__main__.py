"""``python -m taskrunner_conformance MODULE:FACTORY``: see `taskrunner_conformance.runner`."""

from .runner import main

raise SystemExit(main())
