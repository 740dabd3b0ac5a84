"""Decoder states: the caches a strategy steps (growing, static, in-flight rows, no cache) and the small
device graphs they share (row reorder, beam head). Torch-free.
"""
