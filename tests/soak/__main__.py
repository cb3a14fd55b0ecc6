"""``python -m tests.soak``: run the chaos soak (see `tests.soak.driver`)."""

from __future__ import annotations

import sys

from .driver import main

sys.exit(main())
