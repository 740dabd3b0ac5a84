"""tfm-export: deploy encoder-decoder Transformers with ONNX Runtime.

This package's top level imports neither torch nor onnxruntime; import the submodule you need
(`tfm_export.runtime` is torch-free, `tfm_export.model`/`export` need torch).
"""

__version__ = "0.1.0"
