"""Evidence: typed, read-only views over one or more snapshots (processes, stacks, logs, kernel
lines, GPUs, NCCL, the engine's view), built once and shared by every check. Pure: no I/O.

Layer: evidence; may import: the standard library, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot and the foundation.
"""
