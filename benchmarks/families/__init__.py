"""Model families and big models, a module per concept: layouts (the published checkpoints' sizes, random
folders of them), backends (transformers, ONNX Runtime, CTranslate2 and Optimum as runs of new ids), steps (the
time per decoding step, interleaved) and one module per scenario: compare (`families`), marian (`marian`),
opus_mt_folder (`opus-mt-folder`) and big_models (`big-models`)."""
