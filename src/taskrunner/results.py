"""Reading task results and message status on the producer side.

Internal module (being written for issue 12).
"""

from __future__ import annotations

__all__: list[str] = []
