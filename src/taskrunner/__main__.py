"""``python -m taskrunner`` runs the command line."""

import sys

from taskrunner.cli import main

sys.exit(main())
