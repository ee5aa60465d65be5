"""Argument dumps printed before training: OneFlow-Benchmark `key = value`, Megatron dotted tables.

The `key = value` dump is shared by `parsers.oneflow_cnn` and `parsers.oneflow_bert`, the dotted
`--- arguments ---` table by `parsers.megatron` and `parsers.oneflow_gpt`; the records themselves
are read in those modules.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import parse_int

_ARG = logtext.compile(r"^(\w+) = (.*?)\s*$")


def _count(arguments: dict[str, str], key: str) -> int | None:
    """`arguments[key]` as a whole number (`parse_int`: an error naming `key` for `2.5`)."""
    return parse_int(arguments.get(key), key)


def read_argument_dump(text: str, *, stop: logtext.Pattern) -> dict[str, str]:
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
        "num_nodes": _count(arguments, "num_nodes"),
        "gpus_per_node": _count(arguments, "gpu_num_per_node"),
        "batch_size_per_device": _count(arguments, "batch_size_per_device"),
    }
    if arguments.get("model"):
        found["model"] = arguments["model"]
    return found


# Megatron-LM and OneFlow-GPT print their arguments as a dotted table:
#     ------------------------ arguments ------------------------
#       micro_batch_size ................................ 8
#     -------------------- end of arguments ---------------------
_DOTTED = logtext.compile(r"^\s+(\w+) \.{3,}(?: (.*?))?\s*$")
_DOTTED_START = logtext.compile(r"-{3,} arguments -{3,}")
_DOTTED_END = logtext.compile(r"^-+(?: end of arguments -+)?\s*$")


def read_dotted_dump(text: str) -> dict[str, str]:
    """`key ..... value` lines of the first `--- arguments ---` block (empty when none)."""
    found: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if not inside:
            inside = _DOTTED_START.search(line) is not None
            continue
        if _DOTTED_END.match(line.strip()):
            break
        match = _DOTTED.match(line)
        if match:
            found[match.group(1)] = match.group(2) or ""
    return found


def hints_from_dotted(arguments: dict[str, str]) -> dict[str, object]:
    """LogHints fields from a Megatron / OneFlow-GPT argument table.

    `micro_batch_size` is the per-device batch of one micro-step; the parallel layout and the
    model size become the variant, so runs of different layouts are never medianed together.
    """
    world = _count(arguments, "world_size")
    tp = _count(arguments, "tensor_model_parallel_size")
    pp = _count(arguments, "pipeline_model_parallel_size")
    dp = _count(arguments, "data_parallel_size")
    if dp is None and world and tp and pp and world % (tp * pp) == 0:
        dp = world // (tp * pp)
    layout = [("dp", dp), ("tp", tp), ("pp", pp),
              ("hidden_size", _count(arguments, "hidden_size")),
              ("num_layers", _count(arguments, "num_layers")),
              ("num_heads", _count(arguments, "num_attention_heads")),
              ("seq_len", _count(arguments, "seq_length"))]
    variant = ",".join(f"{k}={v}" for k, v in layout if v is not None)
    found: dict[str, object] = {
        "num_nodes": _count(arguments, "num_nodes"),
        "gpus_per_node": _count(arguments, "num_gpus_per_node"),
        "world_size": world,
        "batch_size_per_device": _count(arguments, "micro_batch_size"),
        "global_batch_size": _count(arguments, "global_batch_size"),
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "variant": variant or None,
    }
    flags = {k: arguments.get(k, "").strip().lower() for k in ("fp16", "bf16")}
    if flags["bf16"] == "true":
        found["precision"] = "amp_bf16"
    elif flags["fp16"] == "true":
        found["precision"] = "amp_fp16"
    elif flags["fp16"] == "false" and flags["bf16"] in ("false", ""):
        found["precision"] = "fp32"
    return found
