"""The judge's own exception: the reference, not the kernel under test, failed."""

from __future__ import annotations

from shared.protocol import Failure


class ReferenceFailed(Exception):
    """The reference itself failed: the comparison cannot be made (the reference's verdict)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure
