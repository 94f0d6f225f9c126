"""``python -m neardup``: the ``neardup`` command line, the same program as the ``neardup`` binary
(``cargo install --path .``). pip installs it as the ``neardup`` command too (``main``)."""

from __future__ import annotations

import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the ``neardup`` command line with ``argv`` (by default this process's arguments after
    the program's name) and returns its exit code: 0 done, 1 failed, 2 arguments, settings or
    outputs refused, 128 + n stopped by signal n. While it runs, SIGINT, SIGTERM and SIGHUP stop
    it as they stop the binary; Python's handlers come back after."""
    from ._native import run_cli

    args = sys.argv[1:] if argv is None else list(argv)
    # The command writes to the file descriptors themselves: what Python buffered goes first.
    sys.stdout.flush()
    sys.stderr.flush()
    # Named as the binary is, whatever the script's path: `--help` and messages read the same.
    return run_cli(["neardup", *args])


if __name__ == "__main__":
    sys.exit(main())
