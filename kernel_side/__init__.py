"""Code that runs in the process that imports the kernel under test.

Once the kernel's source is loaded, that process is the kernel's: it can rewrite anything in
it. What this package does there (calling the kernel on the arena's inputs, handing its
outputs over, the in-process figures) is service and precision, never judgement: the judge
(:mod:`judge`) bounds every figure with its own clock and checks every output it keeps.
"""
