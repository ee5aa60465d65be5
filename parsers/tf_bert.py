"""TensorFlow Model Garden BERT logs (`official/nlp/bert/model_training_utils.py`) through absl:
`I0302 02:14:33.799617 140737349982016 model_training_utils.py:539] Train Step: 35/90  / loss =
11.15625`, with ` / time = 0.133 sec` in NVIDIA's fork.

`Train Step: N/M` says N optimizer steps are done (one line per `steps_per_loop` steps, rank 0
only under Horovod). The absl prefix carries month, day and time to the microsecond but no year:
the year is a placeholder that steps on when the month goes back (a log across New Year), so
only differences between lines mean anything. The throughput is the timestamp window (global
batch x steps between two lines / seconds between them), as DLPerf's
`TensorFlow/bert/extract_tensorflow_logs_time.py` computes it: it counts lines containing
`Train Step:` and measures from line W to line T (`--warmup_batches W --train_batches T`; it
starts at line 20 when W < 20 but still divides by T - W). With one line per step, line k is
step k, so DLPerf's W..T is `--warmup-iterations W --measured-iterations T-W`. The printed
`time` (the step without checkpointing or logging) is the fallback (method `latency`) for lines
without the absl prefix.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

import datetime as _dt

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_LATENCY, METHOD_TIMESTAMP_WINDOW

FAMILY = "tf_bert"

RECORD = logtext.compile(
    r"(?:[IWEF](?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d\.\d+)\s+\d+\s+[^\]\s]+\]\s*)?"
    r"Train Step: (?P<step>\d+)/(?P<total>\d+)\s+/ loss = (?P<loss>\S+)"
    r"(?:\s+/ time = (?P<time>[\d.]+) sec)?"
)
_PLACEHOLDER_YEAR = 2000  # a leap year, so that a 0229 prefix reads


def _stamp(month: str, day: str, clock: str, year: int) -> float:
    moment = _dt.datetime.strptime(f"{year}{month}{day} {clock}", "%Y%m%d %H:%M:%S.%f")
    return moment.replace(tzinfo=_dt.timezone.utc).timestamp()


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records: list[IterRecord] = []
    year, last_month = _PLACEHOLDER_YEAR, 0
    for line in text.splitlines():
        match = RECORD.search(line)
        if match is None:
            continue
        stamp = None
        if match["month"]:
            month = int(match["month"])
            if month < last_month:
                year += 1
            last_month = month
            stamp = _stamp(match["month"], match["day"], match["clock"], year)
        step = int(match["step"])
        since = records[-1].iteration if records else None
        loop_time = parse_float(match["time"]) if match["time"] else None
        records.append(IterRecord(
            iteration=step, since_iteration=since, timestamp_s=stamp,
            loss=parse_float(match["loss"]),
            step_time_s=(loop_time / (step - since)
                         if loop_time is not None and since is not None and step > since
                         else None)))
    return finish(FAMILY, records, hints, order=(METHOD_TIMESTAMP_WINDOW, METHOD_LATENCY))
