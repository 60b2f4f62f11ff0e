"""The judge: the trusted process of a comparison.

It loads the reference (never the kernel under test), makes every input from seeds the kernel
cannot know, keeps the clock of the kernel's timed samples, holds their outputs in its own
memory and decides which of them it checks. The kernel's process is driven over a pair
channel (:mod:`judge.partner`) and shares only an arena with it (:mod:`harness.arena`).
Nothing here imports :mod:`kernel_side` (``tests/unit/test_import_boundary.py``).
"""
