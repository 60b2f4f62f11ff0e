"""Timing of kernels: warm-up, CUDA events with an L2 flush, and the statistics reported."""
