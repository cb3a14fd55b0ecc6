"""The numbered properties the suite checks, and how contract sentences become test names.

Property ids P1-P40 follow the conformance reference (``reference/conformance.md``
section 5) so results can be compared with it; ids X1-X39 are guarantees of
`taskrunner.queue.Queue` that the reference does not number, X40-X48 those of the
optional `taskrunner.queue.Scheduling` part, X50-X55 those of
`taskrunner.queue.Leadership`, X60-X66 those of `taskrunner.queue.ResultStore` and
X70-X75 those of `taskrunner.queue.MessageLookup`, X80-X85 those of
`taskrunner.queue.MessageBrowser` and X90-X99 those of flow control
(`taskrunner.queue_flow`). Where the contract lacks the
mechanism a reference property assumes, the property is adapted and its ``adapted``
note says how; the conformance report prints that note.

Each test of the suite names the properties it checks; a property passes when all its
tests pass, fails when any fails, and is skipped (not applicable) when all are skipped.
"""

from __future__ import annotations

import re

from .core_properties import CORE_PROPERTIES, Property
from .part_properties import PART_PROPERTIES

__all__ = ["PROPERTIES", "Property", "contract_sentences", "contract_test_name", "property_by_id"]

# The table itself lives in two modules, one per half of the contract, each well
# under the size of a module one reads whole.
PROPERTIES: tuple[Property, ...] = CORE_PROPERTIES + PART_PROPERTIES

_BY_ID = {prop.id: prop for prop in PROPERTIES}


def property_by_id(property_id: str) -> Property:
    """The property with id `property_id`.

    Raises:
        KeyError: No such property.
    """
    return _BY_ID[property_id]


def contract_sentences(docstring: str) -> list[str]:
    """The guarantee bullets (``* ...``) of a contract docstring, one sentence each."""
    sentences = []
    for line in docstring.splitlines():
        stripped = line.strip()
        if stripped.startswith("* "):
            sentences.append(stripped[2:])
    return sentences


def contract_test_name(sentence: str) -> str:
    """The test name that reads the same as a contract sentence.

    Articles at the start are dropped, ``+`` reads "plus", ``[]`` reads "empty",
    CamelCase names become snake_case and punctuation becomes underscores:
    "A heartbeat never changes the delivery count." becomes
    ``test_heartbeat_never_changes_the_delivery_count``.
    """
    text = sentence.replace("`[]`", "empty").replace("[]", "empty").replace("+", " plus ")
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)
    words = re.findall(r"[a-z0-9]+", text.lower())
    if words and words[0] in ("a", "an", "the"):
        words = words[1:]
    return "test_" + "_".join(words)
