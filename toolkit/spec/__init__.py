"""The case and the grid: what to benchmark, validated before anything runs.

`vocab` (the closed vocabularies), `models` (model sizes), `convert` (strict plain data <->
dataclass, `CaseError`), `case` (`Case` and its parts, ids, the config hash, `resolve`) and
`grid` (grid YAML -> cases); `visible` (control characters shown as escapes, for every
stage that prints text from outside). The names most callers need are importable from here.
"""

from toolkit.spec.case import (
    MAX_REPEATS,
    Case,
    Parallelism,
    PreflightOptions,
    ProfileOptions,
    RankBinding,
    SlurmJobOptions,
    WatchdogOptions,
    resolve,
    valid_case_id,
)
from toolkit.spec.command import CommandOptions
from toolkit.spec.convert import (
    CaseError,
    CaseErrors,
    describe_keys,
    did_you_mean,
    from_plain,
    key_hint,
    key_problem,
    to_plain,
)
from toolkit.spec.models import MODEL_DEFAULTS, ModelConfig
from toolkit.spec.vocab import (
    MODEL_OPTIMIZERS,
    BindingMode,
    CommandLaunch,
    CompiledDDP,
    CompileMode,
    DataParallelKind,
    DataSource,
    DeviceKind,
    Framework,
    GradReduce,
    LossScaling,
    Model,
    Optimizer,
    PipelineSchedule,
    Precision,
    RateScope,
)

__all__ = [
    "MAX_REPEATS", "MODEL_DEFAULTS", "MODEL_OPTIMIZERS", "BindingMode", "Case", "CaseError",
    "CaseErrors", "CommandLaunch", "CommandOptions",
    "CompileMode", "CompiledDDP", "DataParallelKind", "DataSource", "DeviceKind", "Framework",
    "GradReduce", "LossScaling",
    "Model", "ModelConfig", "Optimizer", "Parallelism", "PipelineSchedule", "Precision",
    "PreflightOptions", "ProfileOptions", "RankBinding", "RateScope", "SlurmJobOptions",
    "WatchdogOptions",
    "describe_keys",
    "did_you_mean", "from_plain", "key_hint", "key_problem", "resolve", "to_plain", "valid_case_id",
]
