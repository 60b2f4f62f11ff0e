"""One example per kernel language beside torch and Triton: an elementwise add of two float32
vectors as a KernelBench ``ModelNew``, and a wrong twin of it (``a - b``). Run them with
``python client/examples/kernel_languages.py [SERVER_URL]``."""
