"""`python -m toolkit.runstate begin|end CASE_DIR REPEAT ...`: the entry every generated job
script calls around each repeat. The run lifecycle itself is `toolkit.launch.lifecycle`."""

from __future__ import annotations

import sys

from toolkit.launch.lifecycle import main

if __name__ == "__main__":
    sys.exit(main())
