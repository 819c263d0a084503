"""`python -m seglake.cli`."""

import sys

from seglake.cli.entry import main

sys.exit(main())
