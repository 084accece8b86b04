"""The one protocol every engine runs, written once: the runners' entry (main), the
training run (train, timing, state, fields), the allreduce benchmark, and test faults."""
