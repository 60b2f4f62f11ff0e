"""Correct kernels of every type that must pass unflagged."""
