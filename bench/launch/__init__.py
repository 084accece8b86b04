"""Launch mechanisms that know no engine: clusters of hosts, process supervision and
killing, Slurm allocations and job steps, network namespaces with shaped links."""
