"""What the server and the ncu pass's target (:mod:`kernel_side.ncu_target`, run under ncu)
agree on: the NVTX range ncu profiles, and how the target's own errors begin."""

NVTX_RANGE = "kes_kernel"
ERROR_PREFIX = "kes_ncu_target: error: "
