"""``python -m splitsource``: the ``splitsource`` command, for a Python whose scripts folder is not on PATH."""

import sys

from splitsource.cli import main

sys.exit(main())
