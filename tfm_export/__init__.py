"""tfm-export: deploy encoder-decoder Transformers with ONNX Runtime.

This package's top level imports neither torch nor onnxruntime; import the submodule you need
(`tfm_export.runtime` is torch-free, `tfm_export.model`/`export` need torch).
A plain install has the runtime only; PyTorch and onnx come with the `export` extra.
"""

__version__ = "0.1.0"
