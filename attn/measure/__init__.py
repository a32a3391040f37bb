"""Measurements: timing on any device (timing), the benchmark command (bench), peak memory (memory), the GPUs'
published peaks (peaks) and the whole GPU suite with its figures (gpu).

These may import the layers, the models and ``attn.common``; the layers and models never import them.
"""
