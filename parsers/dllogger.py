"""NVIDIA DLLogger text logs (DeepLearningExamples): PyTorch and TensorFlow 1.x, ResNet50 and BERT.

Every record is `DLL <YYYY-MM-DD HH:MM:SS.ffffff> - <body>`, matched anywhere in a line because
tqdm progress bars get glued in front of it. Bodies read here:

- PyTorch ResNet50: `Epoch: 0 Iteration: 1  train.loss : 7.09  train.total_ips : 267.44 img/s`
- PyTorch BERT: `Training Epoch: 0 Training Iteration: 1  average_loss : ...  step_loss : ...`
  (one iteration is one optimizer step, accumulation included: set `LogHints.accumulation`)
- TensorFlow 1.x ResNet50: `(0, 120) total_ips : 2879.14` (older: `imgs_per_sec : ...`)
- TensorFlow 1.x BERT: `Iteration: 20  throughput_train : 812.3 seq/s ...`

DLLogger's JSON-stream backend (the `--raport-file` DeepLearningExamples' scripts write) gives
one `DLLL {...}` object a line: `"type": "LOG"` with `"step": [epoch, iteration]` is a training
record (a step may be logged in two records, loss and rate in one, timings in the other: they
are merged), `"step": "PARAMETER"` the settings, `"step": []` the summary; records with a
longer step (`[epoch, iteration, validation step]`) and `METADATA` records are not training
iterations. Its `timestamp` (Unix seconds, microseconds) times the record.

`PARAMETER` lines give settings; summary records without an iteration (`() train_throughput`,
`e2e_train_time ... training_sequences_per_second`) are not iterations: their self-reported
figure is kept as `extra["reported_summary_sps"]`. The record shape also says which framework
wrote the log (`torch` or `tensorflow`). The shared machinery is in `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import (
    MAX_ITERATION,
    EpochIterations,
    IterRecord,
    LogHints,
    ParsedLog,
    Skipped,
    finish,
    parse_datetime_s,
    parse_float,
    parse_int,
)

FAMILY = "dllogger"

_DLL = logtext.compile(r"DLL (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d+) - (.*)$")
_METRIC = logtext.compile(r"([A-Za-z_][\w.]*) : (\S+)")
_PYTORCH_BERT = logtext.compile(r"^\s*Training Epoch: (\d+) Training Iteration: (\d+)\b")
_PYTORCH_CNN = logtext.compile(r"^\s*Epoch: (\d+) Iteration: (\d+)\b")
_TF_CNN = logtext.compile(r"^\s*\((\d+), (\d+)\)")
_TF_BERT = logtext.compile(r"^\s*Iteration: (\d+)\b")
_FIELD_GAP = logtext.compile(r"\s{2,}")
_DLLL = logtext.compile(r"DLLL (\{.*\})\s*$")

_RATE_KEYS = ("train.total_ips", "total_ips", "imgs_per_sec", "throughput_train")
_LOSS_KEYS = ("train.loss", "step_loss", "total_loss", "loss")
_SUMMARY_KEYS = ("train_throughput", "training_sequences_per_second", "throughput_train")


def _parameters(body: str) -> dict[str, str]:
    """`PARAMETER k : v  k2 : v2` -> dict; fields are separated by two or more spaces."""
    found = {}
    for token in _FIELD_GAP.split(body.removeprefix("PARAMETER").strip()):
        key, sep, value = token.partition(" :")
        if sep and key.strip():
            found[key.strip()] = value.strip()
    return found


def _number(value: object) -> float | None:
    """A JSON record's number, or None (a string, a bool, a NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return parse_float(str(value))


def _json_record(line: str, settings: dict[str, str], extra: dict[str, float],
                 epochs: EpochIterations, records: list[IterRecord], garbled: Skipped,
                 number: int) -> bool:
    """Read one `DLLL {...}` line into `records`/`settings`/`extra`; False if it is none. A
    torn or garbled record (cut, not JSON, nested too deep) or one whose step no run has is
    counted in `garbled`."""
    match = _DLLL.search(line)
    if match is None:
        return False
    try:
        rec = logtext.json_value(match.group(1))
    except ValueError as error:
        garbled.add(f"line {number}: {error!s:.100}")
        return True
    if not isinstance(rec, dict) or rec.get("type") != "LOG":
        return True
    step, data = rec.get("step"), rec.get("data")
    if not isinstance(data, dict):
        return True
    if step == "PARAMETER":
        settings.update({str(k): str(v) for k, v in data.items()})
        return True
    if step == []:
        for key in (*_SUMMARY_KEYS, *_RATE_KEYS):
            value = _number(data.get(key))
            if value is not None:
                extra["reported_summary_sps"] = value
                break
        return True
    if not (isinstance(step, list) and len(step) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in step)):
        return True  # an epoch's end, or a validation step
    if not all(0 <= v <= MAX_ITERATION for v in step):
        # refused here, before it moves the epoch counter the next records continue from
        garbled.add(f"line {number}: step {str(step)[:60]} is out of range (0..{MAX_ITERATION})")
        return True
    iteration = epochs.total(step[0], step[1])
    stamp = parse_float(str(rec.get("timestamp", "")))
    rate = next((v for k in _RATE_KEYS if (v := _number(data.get(k))) is not None), None)
    loss = next((v for k in _LOSS_KEYS if (v := _number(data.get(k))) is not None), None)
    if records and records[-1].iteration == iteration:  # the second record of one step
        last = records[-1]
        records[-1] = IterRecord(iteration=iteration, timestamp_s=last.timestamp_s,
                                 rate_sps=last.rate_sps if last.rate_sps is not None else rate,
                                 loss=last.loss if last.loss is not None else loss)
    elif rate is not None or loss is not None:
        records.append(IterRecord(iteration=iteration, timestamp_s=stamp, rate_sps=rate,
                                  loss=loss))
    return True


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records: list[IterRecord] = []
    settings: dict[str, str] = {}
    extra: dict[str, float] = {}
    epochs = EpochIterations()
    flavours: set[str] = set()
    garbled = Skipped("DLLL line(s) not JSON or holding a step no run has")
    for number, line in enumerate(text.splitlines(), 1):
        if _json_record(line, settings, extra, epochs, records, garbled, number):
            continue
        match = _DLL.search(line)
        if match is None:
            continue
        stamp, body = match.groups()
        if body.lstrip().startswith("PARAMETER"):
            settings.update(_parameters(body))
            continue
        metrics = {k: v for k, v in _METRIC.findall(body)}
        header = (
            _PYTORCH_BERT.match(body)
            or _PYTORCH_CNN.match(body)
            or _TF_CNN.match(body)
        )
        epoch: int | None
        if header is not None:
            epoch, step = int(header.group(1)), int(header.group(2))
            flavours.add("tensorflow" if header.re is _TF_CNN else "torch")
        elif (tf_bert := _TF_BERT.match(body)) is not None:
            epoch, step = None, int(tf_bert.group(1))
            flavours.add("tensorflow")
        else:
            for key in _SUMMARY_KEYS:
                value = parse_float(metrics.get(key, ""))
                if value is not None:
                    extra["reported_summary_sps"] = value
                    break
            continue
        try:
            timestamp = parse_datetime_s(stamp)
        except ValueError:
            timestamp = None
        rate = next((parse_float(metrics[k]) for k in _RATE_KEYS if k in metrics), None)
        loss = next((parse_float(metrics[k]) for k in _LOSS_KEYS if k in metrics), None)
        records.append(
            IterRecord(
                iteration=epochs.total(epoch, step),
                timestamp_s=timestamp,
                rate_sps=rate,
                loss=loss,
            )
        )
    warnings = garbled.notes()
    if epochs.guessed:
        warnings.append("iteration counter restarted at an epoch change; iterations were "
                        "continued from the last one logged")
    found: dict[str, object] = {}
    batch = parse_int(settings.get("batch_size"), "batch_size")
    world = parse_int(settings.get("world_size"), "world_size")
    if batch is not None:
        found["batch_size_per_device"] = batch
    if settings.get("arch"):
        found["model"] = settings["arch"]
    if len(flavours) == 1:
        # The record shapes differ by framework (PyTorch `Epoch: 0 Iteration: 1`, TensorFlow
        # `(0, 120)` and `Iteration: 20`): the log says which one wrote it.
        found["framework"] = flavours.pop()
    if world is not None:
        found["world_size"] = world
    if world is not None and batch is not None and (
        hints.num_nodes is None or hints.gpus_per_node is None
    ):
        # Only the world size is printed, not nodes x GPUs: enough for the global batch.
        found["global_batch_size"] = world * (hints.batch_size_per_device or batch) * (
            hints.accumulation or 1
        )
        warnings.append(f"topology not given; global batch from the log's world_size={world}")
    effective, conflicts = hints.filled_from_log(found)
    return finish(
        FAMILY, records, effective, warnings=[*warnings, *conflicts], settings=settings,
        extra=extra,
    )
