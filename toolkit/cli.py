"""`trainbench VERB ...`: one entry for every command (`trainbench submit --grid ...` is
`python -m toolkit.submit --grid ...`). Each verb is also a script of its own
(`trainbench-submit`, ...)."""

from __future__ import annotations

import importlib
import sys

from toolkit import interruptible

#: verb -> module whose `main(argv)` runs it
VERBS = {
    "submit": "toolkit.submit",
    "collect": "toolkit.collect",
    "archive": "toolkit.archive",
    "compare": "toolkit.compare",
    "history": "toolkit.history",
    "store": "toolkit.store_cli",
    "status": "toolkit.status",
    "cancel": "toolkit.cancel",
    "gpt-table": "toolkit.gpt_table",
    "preflight": "toolkit.preflight",
    "container": "toolkit.container",
    "localslurm": "toolkit.localslurm.cli",
    "topology": "topology.cli",
}


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help") or args[0] not in VERBS:
        print("usage: trainbench {" + ",".join(VERBS) + "} [arguments]\n"
              "  trainbench VERB --help   the arguments of one verb", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    # imported by name, not at load: each verb brings only what it needs
    module = importlib.import_module(VERBS[args[0]])
    code: int = module.main(args[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
