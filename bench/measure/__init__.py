"""How runs measure: the windowed timing settings and protocol version, intervals
(stats), CPU contention, Horovod's timeline summary and the allreduce benchmark's
defaults. Above the core only."""
