"""The decoding options: `GenerationConfig` (each field declared once with its flag, help and bounds) and
the declaration helpers. Torch-free.
"""
