"""Models, settings and helpers shared by the server process and the worker."""
