"""Kernels that try to game the verdict or the number, or to get out of their worker."""
