"""Sealing a memory file (``memfd``) so that the process it is handed to can trust its bytes.

``F_ADD_SEALS`` with ``F_SEAL_WRITE`` fails with ``EBUSY`` while any page of the file has a
reference beyond its mappings: the kernel waits a moment for such references (page
migration, compaction, a just-ended write) and then gives up. Under memory pressure that
moment can pass, and a comparison would fail for the server's reason, not the kernel's. So
sealing is tried again a few times, backing off, before it fails.
"""

from __future__ import annotations

import errno
import fcntl
import time

SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
SEAL_TRIES = 6
SEAL_FIRST_WAIT_S = 0.01  # doubled after each busy try: 0.63 s in all


def seal(fd: int, seals: int = SEALS) -> None:
    """Add ``seals`` to ``fd``; raises OSError when the file stays busy."""
    wait = SEAL_FIRST_WAIT_S
    for attempt in range(SEAL_TRIES):
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == SEAL_TRIES - 1:
                raise
        time.sleep(wait)
        wait *= 2
