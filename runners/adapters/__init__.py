"""Engine adapters: what each framework supplies to the shared protocol (runners/protocol/)."""
