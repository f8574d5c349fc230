"""``python -m splitsource``: the ``splitsource`` command, for a Python whose scripts folder is not on PATH."""

from splitsource.cli import run

run()
