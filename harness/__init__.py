"""Code loaded in every job process before any user code: the in-process timer, the arena a
judge shares with its kernel's process, tensor bookkeeping and the process's own set-up.

The trust boundary reads from the path: ``judge/`` runs in the checker (which never imports
the kernel under test), ``kernel_side/`` beside the kernel under test, ``worker_host/`` in
the zygote and the sandbox before any user code, and this package in both kinds of job
process. The server imports none of them (``tests/unit/test_import_boundary.py``).
"""
