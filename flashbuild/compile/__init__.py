"""Compiling a plan: generated kernel sources, the memory-aware job schedule, the compiler and
its cache routes (sccache, sccache-dist, the local cluster), progress, the dry run's pre-flight
and the compile-time model. Above every layer but the driver's face (pipeline, backends,
commands)."""
