"""The collector: one process per site that stats the workload manager, finds what
changed since the last cycle and ships it to the workers."""
