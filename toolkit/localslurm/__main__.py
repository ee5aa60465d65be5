"""`python -m toolkit.localslurm ...`: see `toolkit.localslurm.cli`."""

import sys

from toolkit.localslurm.cli import main

sys.exit(main())
