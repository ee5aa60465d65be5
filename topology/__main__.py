"""`python -m topology`: see `topology.cli`."""

from __future__ import annotations

import sys

from topology.cli import main

sys.exit(main())
