"""How runs measure: the windowed timing settings and protocol version, intervals
(stats), CPU contention and Horovod's timeline summary. Above the core only."""
