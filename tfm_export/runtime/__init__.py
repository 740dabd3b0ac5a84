"""The torch-free runtime: numpy + onnxruntime only. Apps embed an export folder with it.

    from tfm_export.runtime import open_export
    model = open_export("model_onnx", device="auto")
    model.generate_ids([[5, 17, 9]], max_new_tokens=20)
    model.translate(["4718"])          # when the manifest has a tokenizer
    model.generate([[5, 17, 9]], num_beams=4, num_return_sequences=2)   # n-best with scores
    for piece in model.stream("4718", do_sample=True, seed=1): ...      # as it is decoded
"""

from .device import Device, RuntimeOptions, parse_device
from .exported import DecodeTimings, ExportedModel, open_export
from .options.generation import GREEDY, GenerationConfig, Hypothesis

__all__ = ["DecodeTimings", "Device", "ExportedModel", "GREEDY", "GenerationConfig", "Hypothesis", "RuntimeOptions",
           "open_export", "parse_device"]
