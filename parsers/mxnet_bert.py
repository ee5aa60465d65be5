"""MXNet GluonNLP BERT pretraining logs: `[step N]\tmlm_loss=...\tthroughput=...K tks/s\t...
latency=X ms/batch` (`ms/step` in later GluonNLP versions).

`X` is the mean milliseconds per step over the `log_interval` steps since the previous line;
each rank prints its own line. DLPerf's `MxNet/BERT/extract_mxnet_logs.py` turns every line
into `1000 / X x batch per device x GPUs` samples/s, takes the median over the ranks' lines of
one step and the mean over its window; here a line is a record with that rate (rank 0's lines
when a launcher tags them, `[1,<rank>]<stdout>:`), and the mean of rates after the warm-up is the
figure. The printed `throughput` counts tokens, not samples, and is not used.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_MEAN_OF_RATES

FAMILY = "mxnet_bert"

_TAG = logtext.compile(r"^\[(\d+),(\d+)\]<(?:stdout|stderr)>:")
RECORD = logtext.compile(r"\[step (\d+)\]\s+mlm_loss=([-\d.eE+naif]+).*?latency=([\d.]+) "
                         r"ms/(?:batch|step)")


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    global_batch = hints.resolved_global_batch_size()
    records: list[IterRecord] = []
    last: dict[int | None, int] = {}
    for line in text.splitlines():
        tag = _TAG.match(line)
        rank = int(tag.group(2)) if tag else None
        match = RECORD.search(line)
        if match is None:
            continue
        step, loss, latency_ms = int(match.group(1)), match.group(2), parse_float(match.group(3))
        step_time = latency_ms / 1000.0 if latency_ms else None
        records.append(IterRecord(
            iteration=step, since_iteration=last.get(rank), rank=rank,
            step_time_s=step_time, loss=parse_float(loss),
            rate_sps=global_batch / step_time if step_time and global_batch else None))
        last[rank] = step
    return finish(FAMILY, records, hints, order=(METHOD_MEAN_OF_RATES,))
