"""Compilation backends: one module per kernel type behind the Protocol in ``base.py``."""
