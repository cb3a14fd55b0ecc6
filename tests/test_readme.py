"""The README's example runs and prints what its comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_example_runs_and_prints_its_result() -> None:
    readme = (ROOT / "README.md").read_text()
    example = readme.split("## Example\n", 1)[1]
    [code] = re.findall(r"```python\n(.*?)```", example.split("\n## ", 1)[0], re.DOTALL)

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "sending hi to ada@example.com",
        "words: 4",
        "succeeded",
    ]
