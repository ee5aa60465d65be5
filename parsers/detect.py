"""Reading foreign log files: format detection, the family registry, DLPerf path hints.

`parse_path(path)` reads one file, finds its family (`detect`), reads the run's shape from a
DLPerf-style path (`hints_from_dlperf_path`, `hints_from_gpt_log_name`) and returns the family
parser's `ParsedLog` (framework and model the family implies filled in where unknown);
`parsers.foreign.to_run_row` turns that into a `RunRow`. Anything unreadable, binary, empty or
of no known family raises `LogParseError` naming the file and the reason: no file is dropped
silently. The per-family line formats live in the family modules.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from parsers import (
    deepspeed,
    dllogger,
    horovod,
    hugectr,
    logtext,
    megatron,
    mindspore,
    mllog,
    mxnet_bert,
    mxnet_speedometer,
    oneflow_bert,
    oneflow_cnn,
    oneflow_gpt,
    oneflow_insightface,
    paddle,
    paddle_bert,
    pytorch_imagenet,
    tf2_official,
    tf_bert,
)
from parsers.foreign import LogHints, LogParseError, ParsedLog

Parser = Callable[..., ParsedLog]

#: family name -> `parse(text, *, hints)`.
PARSERS: dict[str, Parser] = {
    dllogger.FAMILY: dllogger.parse,
    deepspeed.FAMILY: deepspeed.parse,
    mllog.FAMILY: mllog.parse,
    mxnet_bert.FAMILY: mxnet_bert.parse,
    mxnet_speedometer.FAMILY: mxnet_speedometer.parse,
    oneflow_cnn.FAMILY: oneflow_cnn.parse,
    oneflow_bert.FAMILY: oneflow_bert.parse,
    oneflow_gpt.FAMILY: oneflow_gpt.parse,
    oneflow_insightface.FAMILY: oneflow_insightface.parse,
    megatron.FAMILY: megatron.parse,
    horovod.FAMILY: horovod.parse,
    pytorch_imagenet.FAMILY: pytorch_imagenet.parse,
    tf2_official.FAMILY: tf2_official.parse,
    tf_bert.FAMILY: tf_bert.parse,
    paddle.FAMILY: paddle.parse,
    paddle_bert.FAMILY: paddle_bert.parse,
    hugectr.FAMILY: hugectr.parse,
    mindspore.FAMILY: mindspore.parse,
}

# Checked in this order; the first family with a matching line wins. Specific signatures
# (a DLL record, a Megatron iteration line) come before the loose ones (Paddle's elapse).
_SIGNATURES: tuple[tuple[str, logtext.Pattern], ...] = (
    (mllog.FAMILY, logtext.compile(logtext.escape(mllog.TOKEN) + r"\{")),
    # A DLL record other than a PARAMETER line (`_is_dllogger`): group 1 is the body's start;
    # or a JSON-stream `DLLL {...}` training record (group 1 unset).
    (dllogger.FAMILY, logtext.compile(r"DLL \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ - (\S+)"
                                      r'|DLLL \{.*"type": "LOG", "step": \[\d')),
    (megatron.FAMILY, logtext.compile(
        r"iteration\s+\d+\s*/\s*\d+\s*\|.*elapsed time per iteration \(ms\)")),
    (deepspeed.FAMILY, logtext.compile(r"\[timer\.py:\d+:stop\] (?:epoch=\d+/micro_step=\d+/"
                                       r"global_step=\d+|\d+/\d+), (?:RunningAvg)?SamplesPerSec=")),
    (oneflow_gpt.FAMILY, oneflow_gpt.HEADER),
    (oneflow_cnn.FAMILY, logtext.compile(r"(?m)^\s*train: epoch \d+, iter \d+,.*samples/s:")),
    (oneflow_bert.FAMILY, logtext.compile(r"(?m)^\s*step: \d+, total_loss: .*throughput:")),
    (oneflow_insightface.FAMILY, logtext.compile(
        r"(?m)^\s*train: iter \d+, loss \S+, throughput: ")),
    (horovod.FAMILY, logtext.compile(
        r"Epoch\[\d+\] Batch \[\d+-\d+\]\s+Speed: [\d.]+ samples/sec")),
    (mxnet_speedometer.FAMILY, logtext.compile(
        r"(?:Epoch|Iter)\[\d+\] Batch \[\d+\]\s+Speed: [\d.]+ samples/sec")),
    (pytorch_imagenet.FAMILY, logtext.compile(
        r"Epoch: \[\d+\]\[\s*\d+/\d+\]\s+Time\s+[\d.]+")),
    (mxnet_bert.FAMILY, logtext.compile(
        r"\[step \d+\]\s+mlm_loss=.*latency=[\d.]+ ms/(?:batch|step)")),
    (hugectr.FAMILY, logtext.compile(
        r"\[HUGECTR\]\[[\d:]+\]\[INFO\]\[RANK\d+\]: Iter: \d+ Time\(")),
    (paddle_bert.FAMILY, logtext.compile(
        r"(?m)^\s*(?:epoch: \d+, )?(?:progress: \d+/\d+, )?step: \d+, .*speed: [\d.]+ steps/s")),
    (tf_bert.FAMILY, logtext.compile(r"Train Step: \d+/\d+\s+/ loss = ")),
    (tf2_official.FAMILY, tf2_official.RECORD),
    (mindspore.FAMILY, mindspore.TIME),
    (paddle.FAMILY, logtext.compile(
        r"(?:train batch|train step:?|\bbatch|\biter:?)\s*\d+.*(?:\belapse|\bbatch_cost):?\s*"
        r"[\d.]+")),
)

FAMILIES: tuple[str, ...] = tuple(PARSERS)

#: Text every line a family reads a record from contains (any one of them), and every line its
#: signature matches: a line with none of its family's markers is skipped without parsing it (a
#: substring test costs a fraction of a microsecond, a family's parse of a line hundreds).
#: Checked against every recorded log in tests/data/logs.
RECORD_MARKERS: dict[str, tuple[str, ...]] = {
    dllogger.FAMILY: ("DLL",),
    deepspeed.FAMILY: ("[timer.py:",),
    mllog.FAMILY: (mllog.TOKEN,),
    mxnet_bert.FAMILY: ("[step ",),
    mxnet_speedometer.FAMILY: ("] Batch [",),
    oneflow_cnn.FAMILY: ("train: epoch ",),
    oneflow_bert.FAMILY: ("step: ",),
    oneflow_gpt.FAMILY: ("|",),
    oneflow_insightface.FAMILY: ("train: iter ",),
    megatron.FAMILY: ("iteration",),
    horovod.FAMILY: ("] Batch [",),
    pytorch_imagenet.FAMILY: ("Epoch: [",),
    tf2_official.FAMILY: ("TimeHistory: ",),
    tf_bert.FAMILY: ("Train Step: ",),
    paddle.FAMILY: ("elapse", "batch_cost"),
    paddle_bert.FAMILY: ("step: ",),
    hugectr.FAMILY: ("Iter: ",),
    mindspore.FAMILY: ("epoch",),
}

ANY_MARKER: tuple[str, ...] = tuple(dict.fromkeys(m for ms in RECORD_MARKERS.values()
                                                  for m in ms))
"""Every family's markers: a line with none of them is no family's (`detect` skips it)."""


def may_hold_record(line: str, markers: tuple[str, ...]) -> bool:
    """Whether `line` holds one of `markers` (a family's, or ANY_MARKER)."""
    return any(marker in line for marker in markers)

LONG_LINES_SKIPPED = "long_lines_skipped"
"""`ParsedLog.extra` key (and run row column): lines of the file over the line limit of
`parsers.logtext`, skipped; absent when none was."""

#: What a family's logs are, when neither the log nor the caller says: the framework that
#: writes that format, and for the GPT families the model. `dllogger` logs say their framework
#: themselves (PyTorch and TensorFlow records differ).
FAMILY_DEFAULTS: dict[str, dict[str, str]] = {
    deepspeed.FAMILY: {"framework": "deepspeed"},
    dllogger.FAMILY: {},
    mllog.FAMILY: {},
    mxnet_bert.FAMILY: {"framework": "mxnet", "model": "bert_base"},
    mxnet_speedometer.FAMILY: {"framework": "mxnet"},
    oneflow_cnn.FAMILY: {"framework": "oneflow"},
    oneflow_bert.FAMILY: {"framework": "oneflow", "model": "bert_base"},
    oneflow_gpt.FAMILY: {"framework": "oneflow", "model": "gpt"},
    oneflow_insightface.FAMILY: {"framework": "oneflow"},
    megatron.FAMILY: {"framework": "torch", "model": "gpt"},
    horovod.FAMILY: {"framework": "mxnet"},
    pytorch_imagenet.FAMILY: {"framework": "torch"},
    tf2_official.FAMILY: {"framework": "tensorflow"},
    tf_bert.FAMILY: {"framework": "tensorflow", "model": "bert"},
    paddle.FAMILY: {"framework": "paddle"},
    paddle_bert.FAMILY: {"framework": "paddle", "model": "bert_base"},
    hugectr.FAMILY: {"framework": "hugectr", "model": "wide_and_deep"},
    mindspore.FAMILY: {"framework": "mindspore"},
}

_NODES_GPUS = logtext.compile(r"^(\d+)n(\d+)g$")
_LOG_NAME = logtext.compile(
    r"^(?P<model>.+)_b(?P<bs>\d+)_(?P<precision>[^_]+)_(?P<repeat>\d+)\.log$")
# OneFlow-GPT / DLPerf GPT logs: pretrain_gpt_4n8d_dp2_mp4_pp4_mbz8_gbz512_s2048_l24_h2304_nh24.log
_GPT_NAME = logtext.compile(
    r"gpt_(?P<nodes>\d+)n(?P<gpus>\d+)d_dp(?P<dp>\d+)_mp(?P<tp>\d+)_pp(?P<pp>\d+)"
    r"_mbz(?P<mbz>\d+)_gbz(?P<gbz>\d+)_s(?P<seq>\d+)_l(?P<layers>\d+)_h(?P<hidden>\d+)"
    r"_nh(?P<heads>\d+)"
)


def detect(text: str) -> str | None:
    """The family name of a log's text, or `None` when no known family matches."""
    for family, signature in _SIGNATURES:
        if family == dllogger.FAMILY:
            if _is_dllogger(text, signature):
                return family
        elif signature.search(text):
            return family
    return None


def _is_dllogger(text: str, signature: logtext.Pattern) -> bool:
    """Whether `text` holds a DLL record that is not a PARAMETER line (RE2 has no look-ahead
    to say so in the pattern)."""
    return any(not (match[1] or "").startswith("PARAMETER")
               for match in signature.finditer(text))


def hints_from_dlperf_path(path: str | os.PathLike[str]) -> LogHints:
    """Hints from `<N>n<G>g/<model>_b<bs>_<precision>_<repeat>.log` (any number of digits).

    Parts of the path that do not follow the layout leave their fields `None`.
    """
    p = Path(path)
    nodes = gpus = batch = repeat = None
    model = precision = None
    topology = _NODES_GPUS.match(p.parent.name)
    if topology:
        nodes, gpus = int(topology.group(1)), int(topology.group(2))
    name = _LOG_NAME.match(p.name)
    if name:
        model, precision = name.group("model"), name.group("precision")
        batch, repeat = int(name.group("bs")), int(name.group("repeat"))
    return LogHints(
        num_nodes=nodes, gpus_per_node=gpus, batch_size_per_device=batch, model=model,
        precision=precision, repeat=repeat,
    )


def hints_from_gpt_log_name(path: str | os.PathLike[str]) -> LogHints:
    """Hints from a DLPerf GPT log name (`pretrain_gpt_<N>n<G>d_dp.._mp.._pp.._mbz.._gbz..`
    `_s.._l.._h.._nh...log`): topology, micro batch, global batch and the layout as variant."""
    match = _GPT_NAME.search(Path(path).name)
    if match is None:
        return LogHints()
    g = {k: int(v) for k, v in match.groupdict().items()}
    variant = (f"dp={g['dp']},tp={g['tp']},pp={g['pp']},hidden_size={g['hidden']},"
               f"num_layers={g['layers']},num_heads={g['heads']},seq_len={g['seq']}")
    return LogHints(num_nodes=g["nodes"], gpus_per_node=g["gpus"], batch_size_per_device=g["mbz"],
                    global_batch_size=g["gbz"], model="gpt", dp=g["dp"], tp=g["tp"],
                    pp=g["pp"], variant=variant)


def _merge(base: LogHints, override: LogHints | None) -> LogHints:
    """`override`'s known fields over `base` (window settings always from `override`)."""
    if override is None:
        return base
    changes = {
        name: value
        for name, value in vars(override).items()
        if value is not None
    }
    return replace(base, **changes)


def read_text(path: str | os.PathLike[str]) -> logtext.LogText:
    """A log's lines within the limits of `parsers.logtext` (streamed; over-long lines skipped
    and counted); `LogParseError` for unreadable, binary, too large or empty files."""
    try:
        read = logtext.read_lines(path)
    except logtext.ReadError as error:
        raise LogParseError(f"{path}: {error}") from error
    if not read.text.strip():
        skipped = f" ({logtext.long_lines_note(read.long_lines)})" if read.long_lines else ""
        raise LogParseError(f"{path}: empty file{skipped}")
    return read


def parse_text(text: str, fmt: str = "auto", hints: LogHints | None = None) -> ParsedLog:
    """Parse a log's text with the family `fmt` (or the detected one)."""
    if fmt == "auto":
        family = detect(text)
        if family is None:
            raise LogParseError(
                f"no known log format (looked for: {', '.join(FAMILIES)})"
            )
    elif fmt in PARSERS:
        family = fmt
    else:
        raise LogParseError(f"unknown format {fmt!r}; valid: auto, {', '.join(FAMILIES)}")
    try:
        parsed = _parse_family(family, text, hints or LogHints())
    except LogParseError as error:
        raise LogParseError(f"{family}: {error}") from error
    except (ValueError, ArithmeticError, IndexError, KeyError, OverflowError) as error:
        # Damaged input (a truncated number, a torn line) must surface as a parse error.
        raise LogParseError(f"{family}: damaged log: {error}") from error
    defaults = FAMILY_DEFAULTS[family]
    hints_ = parsed.hints
    filled = replace(hints_, framework=hints_.framework or defaults.get("framework"),
                     model=hints_.model or defaults.get("model"))
    return replace(parsed, hints=filled)


MAX_DIGITS = 100
"""Digits in one run of digits of a log line; a longer one is no figure of any log."""
_LONG_NUMBER = logtext.compile(rf"\d{{{MAX_DIGITS + 1}}}")


def _parse_family(family: str, text: str, hints: LogHints) -> ParsedLog:
    """The family's parse of `text`. Where it fails on a number (Python refuses to convert an
    integer of more than 4,300 digits) and lines hold numbers of more than `MAX_DIGITS` digits,
    which no log prints, those lines are left out and counted, and the rest is read: one
    absurd line never loses the log."""
    try:
        return PARSERS[family](text, hints=hints)
    except (ValueError, ArithmeticError) as error:
        if _LONG_NUMBER.search(text) is None:
            raise
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if _LONG_NUMBER.search(line) is None]
        try:
            parsed = PARSERS[family]("".join(kept), hints=hints)
        except (ValueError, ArithmeticError):
            raise error from None
        note = (f"{len(lines) - len(kept)} line(s) holding a number of more than {MAX_DIGITS} "
                "digits skipped (no log prints one)")
        return replace(parsed, warnings=(*parsed.warnings, note))


def parse_path(
    path: str | os.PathLike[str], fmt: str = "auto", hints: LogHints | None = None
) -> ParsedLog:
    """Read, detect and parse one foreign log; `hints` override what the path says."""
    read = read_text(path)
    note = logtext.long_lines_note(read.long_lines) if read.long_lines else None
    try:
        merged = _merge(_merge(hints_from_gpt_log_name(path), hints_from_dlperf_path(path)),
                        hints)
        parsed = parse_text(read.text, fmt, merged)
    except LogParseError as error:
        raise LogParseError(f"{path}: {error}" + (f" ({note})" if note else "")) from error
    if note is None:
        return replace(parsed, source=str(path))
    return replace(parsed, source=str(path), warnings=(*parsed.warnings, note),
                   extra={**parsed.extra, LONG_LINES_SKIPPED: read.long_lines})
