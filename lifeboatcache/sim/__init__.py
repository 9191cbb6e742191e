"""Trace-driven cache simulation: an engine GPU prefix cache in front of one lifeboatcache tier.

``workload``  traces → compact request list (block ids as ints) and the working set
``engine``    the engine's own GPU prefix cache (LRU of G blocks), computed once per workload
``replay``    one eviction policy (any registered ``EvictionPolicy``) on a tier of C blocks
``belady``    Bélády's offline optimum on the same tier: the upper bound
``audit``     the check that a policy's decisions use only the past (no future leak)
``sweep``     policies x capacities → result rows for ``bench traces`` and ``advise``
"""
