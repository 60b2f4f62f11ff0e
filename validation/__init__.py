"""Correctness: compare a kernel's outputs with the reference's, honestly."""
