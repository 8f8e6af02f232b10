"""Collection: the probe that runs on the target host (its own Python 3.8+, stdlib only,
psutil and pynvml when present) and reads, within deadlines, everything a hang leaves: the
process tree, stacks (py-spy), GPUs (NVML / nvidia-smi), logs, kernel log, sockets, NCCL's own
records, the engine's progress signals. ``probe_pack.py`` packs these modules into one script.

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""
