"""The zygote and the sandbox: trusted code that forks job processes and confines them, all of
it run before any user code exists in the process (see docs/ENGINE.md)."""
