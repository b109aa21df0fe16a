"""Errors meant for the user: their message names the problem and the fix, without a traceback."""
from __future__ import annotations

import sys
from typing import Callable


class UserError(Exception):
    """Base of every error whose message is the whole story for the person running the tool."""


class WeightSourceError(UserError):
    """A weight source that cannot deliver; the message says what to change."""


def run_script(main: Callable[[], object]) -> int:
    """Runs a CLI's main; a UserError becomes one 'error:' line on stderr and exit status 1."""
    try:
        main()
    except UserError as err:
        print(f"{sys.argv[0]}: error: {err}", file=sys.stderr)
        return 1
    return 0
