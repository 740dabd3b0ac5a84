"""What `int4-sensitivity` and `wide-fixture` build on (benchmarks/forms.py): 4-bit round to nearest as the
export's int4 stores weights (rtn), each Linear's weight class, a trained fixture's eager model decoded with some
classes rounded (Probe), and a fixture task trained at another width (train_wide)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import InputError, OutputError
from . import fixtures

BLOCK = 32  # the block `--int4-block-size auto` gives weights under 1024 inputs (every fixture weight)
SENSITIVITY_BATCH = 50


def rtn(weight: Any, block: int = BLOCK) -> Any:
    """`weight` (out, in) rounded to 4 bits in blocks of `block` inputs and back (export.int4's rtn: ORT's packing)."""
    import torch

    out, k = weight.shape
    x = torch.nn.functional.pad(weight, (0, (-k) % block)).reshape(out, -1, block)
    low, high = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
    scale = (high - low) / 15
    scale[scale == 0] = 1
    zero = torch.round(-low / scale).clamp(0, 15)
    return ((torch.clamp(torch.round(x / scale + zero), 0, 15) - zero) * scale).reshape(out, -1)[:, :k]


def weight_class(name: str) -> str:
    """encoder.self.q_proj, decoder.cross.out_proj, decoder.ffn.fc2, ... (BART-like and T5 module names)."""
    side = "encoder" if ".encoder." in f".{name}" and "encoder_attn" not in name else "decoder"
    part = ("cross" if "encoder_attn" in name or "EncDecAttention" in name else
            "self" if "self_attn" in name or "SelfAttention" in name else "ffn")
    return f"{side}.{part}.{name.split('.')[-1]}"


class Probe:
    """A fixture's eager model, its float32 outputs on the held-out sources, and decodes with weights rounded."""

    def __init__(self, family: str, numbers: int) -> None:
        import torch
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        transformers.logging.set_verbosity_error()
        hf = fixtures.hf()
        folder = hf.trained_folder(family)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if any(hf.lang_code(family, lang) for lang in hf.TARGETS[family]):
            raise InputError(f"{family} takes language tokens; this probe decodes families whose source says the "
                             f"target (marian, bart, pegasus, t5, flan_t5, mt5)")
        examples = [hf.example(family, n, lang) for lang in hf.TARGETS[family] for n in hf.split_numbers()[1][:numbers]]
        self.sources, self.references = [e.source for e in examples], [e.target for e in examples]
        self.model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        self.original = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.linears = {name: weight_class(name) for name, m in self.model.named_modules()
                        if isinstance(m, torch.nn.Linear) and "lm_head" not in name}
        self.float32 = self.decode()

    def decode(self) -> list[str]:
        import torch

        out: list[str] = []
        for i in range(0, len(self.sources), SENSITIVITY_BATCH):
            batch = self.tokenizer(self.sources[i:i + SENSITIVITY_BATCH], return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = self.model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=64)
            out += [t.strip() for t in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]
        return out

    def rounded(self, classes: set[str]) -> dict[str, float]:
        """% of outputs identical to float32's and chrF against the references, the weights of `classes` 4-bit."""
        import sacrebleu
        import torch

        self.model.load_state_dict(self.original)
        modules = dict(self.model.named_modules())
        with torch.no_grad():
            for name, cls in self.linears.items():
                if cls in classes:
                    modules[name].weight.copy_(rtn(modules[name].weight))
        outs = self.decode()
        same = sum(a == b for a, b in zip(outs, self.float32))
        return {"identical": round(100 * same / len(outs), 1),
                "chrf": round(sacrebleu.corpus_chrf(outs, [self.references]).score, 2)}


def train_wide(family: str, d_model: int, ffn: int, folder: Path, **train: Any) -> dict[str, Any] | None:
    """The fixture task of `family` trained at `d_model` wide (heads of 64, as Marian's, NLLB's and T5's d_kv; `ffn`;
    the fixture's layer counts) into `folder`, staged beside it then renamed (train() replaces its folder); its
    training metrics, or None when `folder` holds one already."""
    if folder.exists():
        if not (folder / "model.safetensors").exists():
            raise OutputError(f"{folder} exists and holds no trained model; remove it or choose another --work")
        return None
    folder.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    hf = fixtures.hf()
    layers = hf.SHAPES["trained"][family]
    shape = hf.Shape(d_model, layers.encoder_layers, layers.decoder_layers, d_model // 64, ffn,
                     64 if layers.d_kv else 0)
    try:
        metrics = fixtures.train().train(family, folder=stage, shape=shape, **train)
        stage.rename(folder)
    except BaseException:  # an interrupted or failed training leaves nothing: the stage is this call's mkdtemp
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return metrics
