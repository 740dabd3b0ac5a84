"""The torch-free runtime: numpy + onnxruntime only. Apps embed an export folder with it.

    from tfm_export.runtime import open_export
    model = open_export("model_onnx", device="auto")
    model.generate_ids([[5, 17, 9]], max_new_tokens=20)
    model.translate(["4718"])          # when the manifest has a tokenizer
"""

from .device import Device, RuntimeOptions, parse_device
from .exported import DecodeTimings, ExportedModel, open_export

__all__ = ["DecodeTimings", "Device", "ExportedModel", "RuntimeOptions", "open_export", "parse_device"]
