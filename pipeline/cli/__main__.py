"""`python -m pipeline.cli ...` is the `seer` command."""

import sys

from pipeline.cli.main import main

sys.exit(main())
