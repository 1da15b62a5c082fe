"""`python -m ffwd.cli COMMAND ...`: the same as the `ffwd` script."""

import sys

from ffwd.cli import main

sys.exit(main())
