"""NVIDIA DLLogger text logs (DeepLearningExamples): PyTorch and TensorFlow 1.x, ResNet50 and BERT.

Every record is `DLL <YYYY-MM-DD HH:MM:SS.ffffff> - <body>`, matched anywhere in a line because
tqdm progress bars get glued in front of it. Bodies read here:

- PyTorch ResNet50: `Epoch: 0 Iteration: 1  train.loss : 7.09  train.total_ips : 267.44 img/s`
- PyTorch BERT: `Training Epoch: 0 Training Iteration: 1  average_loss : ...  step_loss : ...`
  (one iteration is one optimizer step, accumulation included: set `LogHints.accumulation`)
- TensorFlow 1.x ResNet50: `(0, 120) total_ips : 2879.14` (older: `imgs_per_sec : ...`)
- TensorFlow 1.x BERT: `Iteration: 20  throughput_train : 812.3 seq/s ...`

`PARAMETER` lines give settings; summary records without an iteration (`() train_throughput`,
`e2e_train_time ... training_sequences_per_second`) are not iterations: their self-reported
figure is kept as `extra["reported_summary_sps"]`. The record shape also says which framework
wrote the log (`torch` or `tensorflow`). The shared machinery is in `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import (
    EpochIterations,
    IterRecord,
    LogHints,
    ParsedLog,
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


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records: list[IterRecord] = []
    settings: dict[str, str] = {}
    extra: dict[str, float] = {}
    epochs = EpochIterations()
    flavours: set[str] = set()
    for line in text.splitlines():
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
    warnings = []
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
