"""Jobs: their states and store, the device slots, the worker processes, and the manager."""
