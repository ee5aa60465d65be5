"""The `key = value` argument dump OneFlow-Benchmark scripts print before training.

Shared by `parsers.oneflow_cnn` and `parsers.oneflow_bert`; the records themselves are read
in those modules.
"""

from __future__ import annotations

import re

from parsers.foreign import parse_int

_ARG = re.compile(r"^(\w+) = (.*?)\s*$")


def read_argument_dump(text: str, *, stop: re.Pattern[str]) -> dict[str, str]:
    """`key = value` lines up to the first line matching `stop` (the first training record)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if stop.search(line):
            break
        match = _ARG.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def hints_from_arguments(arguments: dict[str, str]) -> dict[str, object]:
    """The LogHints fields an argument dump gives."""
    found: dict[str, object] = {
        "num_nodes": parse_int(arguments.get("num_nodes")),
        "gpus_per_node": parse_int(arguments.get("gpu_num_per_node")),
        "batch_size_per_device": parse_int(arguments.get("batch_size_per_device")),
    }
    if arguments.get("model"):
        found["model"] = arguments["model"]
    return found
