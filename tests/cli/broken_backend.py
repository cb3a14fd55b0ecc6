"""A "third-party" backend whose module fails to import (not with an ImportError)."""

from __future__ import annotations

raise RuntimeError("the broken backend cannot be imported: its configuration is missing")
