"""MXNet `Speedometer` lines: `Epoch[0] Batch [20]<TAB>Speed: 1195.56 samples/sec<TAB>acc=0.000000`
(`Iter[0] Batch [K]` in some scripts; the `Batch [a-b]` form of later MXNet is `parsers.horovod`).

`Speedometer(batch_size, frequent)` prints every `frequent` batches the samples per second of
one worker over the batches since its previous line; `K` is the 0-based index of the batch just
done, so the record is at iteration `K + 1` of the epoch (counted on across epochs) and covers
the iterations since the previous record. MXNet before 1.0 printed one line per training metric
(`Train-accuracy=...`, then `Train-top_k_accuracy_5=...`) with the same speed: such lines are one
record. A `Node[k]` prefix names the worker.

The figure is DLPerf's (`MxNet/InsightFace/ArcFace/extract_mxnet_logs.py`): each worker's speed
times the number of nodes (each node's worker prints its own share), averaged over the lines of
the window. DLPerf slices the lines `[W//20 : T//20]` (`--warmup_batches W --train_batches T`,
assuming a line every 20 batches), which has an upper bound: here the mean of rates counts the
intervals that start at or after `--warmup-iterations` and end by `warmup + measured`. For a log
with a line every 20 batches, DLPerf's W..T is `--warmup-iterations W+1 --measured-iterations
T-W`; with a line every f batches printed m times (one per metric), DLPerf's lines i = W//20 to
j = T//20 are the intervals i/m to j/m, `--warmup-iterations (i/m)*f+1 --measured-iterations
((j-i)/m)*f`. DLPerf rounds each speed to 0.1 before averaging; this parser does not.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import EpochIterations, IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_MEAN_OF_RATES

FAMILY = "mxnet_speedometer"

RECORD = logtext.compile(
    r"(?:Node\[(?P<node>\d+)\] )?(?:Epoch|Iter)\[(?P<epoch>\d+)\] Batch \[(?P<batch>\d+)\]"
    r"\s+Speed: (?P<speed>[\d.]+) samples/sec"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records: list[IterRecord] = []
    counters: dict[int | None, EpochIterations] = {}
    last: dict[int | None, tuple[int, int, int]] = {}
    nodes = hints.num_nodes or 1
    for line in text.splitlines():
        match = RECORD.search(line)
        if match is None:
            continue
        rank = int(match["node"]) if match["node"] is not None else None
        epoch, batch = int(match["epoch"]), int(match["batch"])
        counter = counters.setdefault(rank, EpochIterations())
        iteration = counter.total(epoch, batch + 1)
        previous = last.get(rank)
        if previous is not None and previous[:2] == (epoch, batch):
            continue  # the same interval printed again for another metric
        speed = parse_float(match["speed"])
        records.append(IterRecord(
            iteration=iteration, since_iteration=previous[2] if previous else None, rank=rank,
            rate_sps=speed * nodes if speed is not None else None))
        last[rank] = (epoch, batch, iteration)
    warnings = [] if hints.num_nodes else [
        "Speed is one worker's; the number of nodes is unknown, so the rate is as printed "
        "(pass --nodes for a multi-node run)"]
    return finish(FAMILY, records, hints, order=(METHOD_MEAN_OF_RATES,), warnings=warnings,
                  bounded_rates=True)
