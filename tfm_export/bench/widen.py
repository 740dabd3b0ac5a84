"""A trained M2M100/NLLB folder widened into a big layout (the NLLB-600M one: d_model 1024, 16 heads, 12 + 12
layers, ffn 4096, 256206 ids) without changing its function (Net2Net's replication, as
models/whisper-digits/wide.py widens Whisper): issue #63's "NLLB-600M with an int4 self-draft" on a model that
translates, where no such checkpoint can be downloaded.

Every d_model vector of the big model is `w` = D / d copies of the small one's (feature r holds feature r % d),
so a layer norm over D features sees the d features' mean; a layer reading copies gets its weights gathered and
divided by w; heads grow `a` times in number and `b` times in width (each new head holds b copies of one old
head's dims; q is divided by sqrt(b) so the scores are the old ones); the FFN's units are copies too. Copies are
spread (r % d, not r // w): int4 quantises blocks of consecutive inputs, and a block of a few distinct values
would be nearly exact (its min and max are), flattering an int4 draft; spread, a block of 128 holds 64 of them.

What replication cannot carry is M2M100's sinusoidal positions: they are computed from d_model, and the big
table is no copy of the small one. The big model is still exactly a small one, a "proxy" (`as_proxy`): the
readers of copies see, for feature i, the mean q_i(pos) of the big table over i's w columns, and every layer
norm's variance gains eps(pos) = mean_r P_r(pos)^2 - mean_i q_i(pos)^2 (the big table's energy the copies do not
hold). So the recipe: the trained folder `deepen`ed to the big layer counts (added layers: small random residual
branches, transformers' init), made a proxy (q as its positions, eps in its norms), `distill`ed from the trained
folder (all layers, KL to its distributions: the proxy's positions differ), then `widen`ed (logits equal the
proxy's: tests/test_widen.py). The big vocabulary's added rows are small random vectors, scored far below the
trained rows (checked by the caller on the held-out sources).
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import torch
import transformers
from torch import nn

log = logging.getLogger(__name__)

SIZES = ("d_model", "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
         "vocab_size")  # what `widen` changes (the layer counts are `deepen`'s)
EXTRA_STD = 0.02  # the added vocabulary rows: N(0, EXTRA_STD) per feature (transformers' init_std)
STACKS = ("encoder", "decoder")
M2M100 = transformers.M2M100ForConditionalGeneration


def _table(n: int, d_big: int, padding_idx: int) -> torch.Tensor:
    return transformers.models.m2m_100.modeling_m2m_100.M2M100SinusoidalPositionalEmbedding.get_embedding(
        n, d_big, padding_idx)


def proxy_tables(n: int, d: int, d_big: int, padding_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, eps): the positions a proxy of width d reads (n x d) and its norms' extra variance (n x 1)."""
    big = _table(n, d_big, padding_idx)
    q = big.view(n, d_big // d, d).mean(1)  # feature i's copies: the columns r with r % d == i
    return q, (big.pow(2).mean(-1) - q.pow(2).mean(-1)).unsqueeze(-1)


class OffsetNorm(nn.LayerNorm):
    """A LayerNorm whose variance gains `extra[stack]` (batch x length x 1), set before each stack runs."""

    def __init__(self, norm: nn.LayerNorm, extra: dict[str, torch.Tensor], stack: str):
        super().__init__(norm.normalized_shape, eps=norm.eps)
        self.load_state_dict(norm.state_dict())
        self.extra, self.stack = extra, stack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(-1, keepdim=True)
        var = centred.pow(2).mean(-1, keepdim=True) + self.extra[self.stack]
        return centred / torch.sqrt(var + self.eps) * self.weight + self.bias


def as_proxy(model: M2M100, d_big: int) -> M2M100:
    """`model` (in place) computing what its widening to d_big computes: the proxy's positions and norms (see the
    module docstring). Without a cache only (teacher forcing, whole-sequence calls): eps follows position ids."""
    cfg, extra = model.config, {}
    for stack in STACKS:
        part = getattr(model.model, stack)
        table = part.embed_positions
        q, eps = proxy_tables(table.weights.shape[0], cfg.d_model, d_big, table.padding_idx)
        table.weights = nn.Buffer(q, persistent=False)

        def hook(module: nn.Module, args: tuple, kwargs: dict, stack: str = stack, eps: torch.Tensor = eps) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            if kwargs.get("past_key_values") is not None and kwargs["past_key_values"].get_seq_length():
                raise ValueError("a proxy runs without a cache")
            positions = module.embed_positions.create_position_ids_from_input_ids(ids, cfg.pad_token_id, 0)
            extra[stack] = eps[positions]

        part.register_forward_pre_hook(hook, with_kwargs=True)
        for child in list(part.modules()):
            for attr, norm in list(child.named_children()):
                if isinstance(norm, nn.LayerNorm):
                    setattr(child, attr, OffsetNorm(norm, extra, stack))
    return model


def deepen(model: M2M100, encoder_layers: int, decoder_layers: int, seed: int = 1234) -> M2M100:
    """`model` with more layers on top of its own: the added ones as transformers initialises them (small random
    residual branches: init_std 0.02), the trained ones and everything else copied."""
    config = transformers.M2M100Config.from_dict(model.config.to_dict())
    config.encoder_layers, config.decoder_layers = encoder_layers, decoder_layers
    torch.manual_seed(seed)
    deep = transformers.M2M100ForConditionalGeneration(config).eval()
    missing = deep.load_state_dict(model.state_dict(), strict=False)
    assert not missing.unexpected_keys, missing.unexpected_keys
    deep.generation_config = transformers.GenerationConfig.from_dict(model.generation_config.to_dict())
    return deep


def distill(student: nn.Module, teacher: nn.Module, batches: Iterator[tuple[torch.Tensor, ...]], steps: int,
            lr: float = 2e-3, start_id: int = 2, pad_id: int = 1) -> float:
    """`steps` batches ((source ids, mask, labels: -100 where padded)) of AdamW on KL(teacher || student) at the
    labels' positions, teacher-forced on the labels; cosine-decayed lr. The last loss."""
    opt = torch.optim.AdamW(student.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    student.train()
    teacher.eval()
    began, loss = time.time(), torch.zeros(())
    for step in range(steps):
        src, mask, labels = next(batches)
        decoder = torch.cat([torch.full_like(labels[:, :1], start_id), labels[:, :-1]], 1)
        decoder = decoder.masked_fill(decoder == -100, pad_id)  # the labels shifted right, as the fixtures train
        with torch.no_grad():
            target = teacher(input_ids=src, attention_mask=mask, decoder_input_ids=decoder).logits.log_softmax(-1)
        logits = student(input_ids=src, attention_mask=mask, decoder_input_ids=decoder).logits.log_softmax(-1)
        kept = labels != -100
        loss = nn.functional.kl_div(logits[kept], target[kept], log_target=True, reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log.info("distill step %d: KL %.4f, %.0f s", step, loss.item(), time.time() - began)
    student.eval()
    return loss.item()


def _indexes(small: Any, big: Any) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Which small feature each big one copies (model dims, attention dims, FFN units) and the divisors."""
    d, big_d = small.d_model, big.d_model
    heads, big_heads = small.encoder_attention_heads, big.encoder_attention_heads
    head, big_head = d // heads, big_d // big_heads
    n = torch.arange(big_d)
    inner = (n // big_head) % heads * head + n % head  # new head H holds old head H % heads, its dims b times
    w, b = big_d // d, big_head // head
    ffn = big.encoder_ffn_dim // small.encoder_ffn_dim
    spread = {"model": n % d, "inner": inner, "ffn": torch.arange(big.encoder_ffn_dim) % small.encoder_ffn_dim}
    return ({**spread, "one": None},
            {"w": w, "q": w * math.sqrt(b), "qb": math.sqrt(b), "ffn": ffn, "1": 1})  # w: a x b copies of an attention dim


# parameter name's end -> (its rows copy, its columns copy, divided by); biases and norms have rows only
_PLAN = {"q_proj.weight": ("inner", "model", "q"), "q_proj.bias": ("inner", "one", "qb"),
         "k_proj.weight": ("inner", "model", "w"), "v_proj.weight": ("inner", "model", "w"),
         "k_proj.bias": ("inner", "one", "1"), "v_proj.bias": ("inner", "one", "1"),
         "out_proj.weight": ("model", "inner", "w"), "out_proj.bias": ("model", "one", "1"),
         "fc1.weight": ("ffn", "model", "w"), "fc1.bias": ("ffn", "one", "1"),
         "fc2.weight": ("model", "ffn", "ffn"), "fc2.bias": ("model", "one", "1"),
         "norm.weight": ("model", "one", "1"), "norm.bias": ("model", "one", "1")}


def _copied(name: str, value: torch.Tensor, index: dict[str, torch.Tensor], divisor: dict[str, float]) -> torch.Tensor:
    rows, cols, div = next(plan for end, plan in _PLAN.items() if name.replace("layer_", "").endswith(end))
    value = value[index[rows]]
    return (value if index[cols] is None else value[:, index[cols]]) / divisor[div]


def widen(proxy: M2M100, sizes: dict[str, int], seed: int = 1234) -> M2M100:
    """The M2M100 of `proxy`'s config with `sizes` (SIZES' keys) computing what the proxy (`as_proxy` at
    sizes["d_model"]) computes: every weight copied (see the module docstring); vocabulary rows past the proxy's
    are N(0, EXTRA_STD)."""
    small = proxy.config
    config = transformers.M2M100Config.from_dict({**small.to_dict(), **sizes})
    assert sizes["encoder_attention_heads"] == sizes["decoder_attention_heads"], "one head layout for both stacks"
    index, divisor = _indexes(small, config)
    torch.manual_seed(seed)
    with torch.no_grad():
        big = transformers.M2M100ForConditionalGeneration(config).eval()
        weights = proxy.state_dict()
        for name, param in big.named_parameters():
            if name.endswith("shared.weight") or name.endswith("embed_tokens.weight"):
                rows = weights[name][:, index["model"]] * math.sqrt(small.d_model / config.d_model)
                param[rows.shape[0]:].normal_(0.0, EXTRA_STD)
                param[:rows.shape[0]] = rows
            else:
                param.copy_(_copied(name, weights[name], index, divisor))
        # the tied head reads copies (w x the dot) of embeddings scaled by sqrt(d / D): sqrt(w) too many
        for param in big.model.decoder.layer_norm.parameters():
            param /= math.sqrt(divisor["w"])
    big.generation_config = transformers.GenerationConfig.from_dict(proxy.generation_config.to_dict())
    return big


def widened_folder(trained: Path, out: Path, layout: dict[str, Any], batches: Iterator[tuple[torch.Tensor, ...]],
                   steps: int) -> Path:
    """The M2M100 folder `trained` in `layout` (SIZES and the layer counts of an M2M100Config): deepened, made a
    proxy, distilled from `trained` for `steps` batches and widened (the module docstring); written to `out` as
    save_pretrained writes it, with `trained`'s tokenizer files."""
    teacher = transformers.M2M100ForConditionalGeneration.from_pretrained(trained).eval()
    proxy = as_proxy(deepen(teacher, layout["encoder_layers"], layout["decoder_layers"]), layout["d_model"])
    log.info("distilling %s into its proxy (%d + %d layers, %d steps)", trained, layout["encoder_layers"],
             layout["decoder_layers"], steps)
    distill(proxy, teacher, batches, steps, start_id=teacher.config.decoder_start_token_id,
            pad_id=teacher.config.pad_token_id)
    big = widen(proxy, {k: layout[k] for k in SIZES})
    big.save_pretrained(out)
    for path in trained.iterdir():  # the tokenizer: every file the model's save_pretrained did not write
        if not (out / path.name).exists() and path.name != "model.safetensors":
            shutil.copy(path, out / path.name)
    return out


def nllb_fixture_widened(out: Path, layout: dict[str, Any], steps: int, family: str = "nllb") -> Path:
    """The tests' trained nllb fixture (tests/fixtures/trained/nllb: d_model 64, 2 + 2 layers, 566 ids) in
    `layout`, distilled on its own training pairs (train_fixtures' tokenization and batches)."""
    from . import fixtures

    hf, train = fixtures.hf(), fixtures.train()
    trained = hf.trained_folder(family)
    numbers, _ = hf.split_numbers()
    examples = [hf.example(family, n, lang) for n in numbers for lang in hf.TARGETS[family]]
    pairs: dict[int, list] = {}
    for example, pair in zip(examples, train.tokenized(family, hf.hf_tokenizer(trained), examples)):
        pairs.setdefault(len(str(example.number)), []).append(pair)
    pad = transformers.AutoConfig.from_pretrained(trained).pad_token_id
    return widened_folder(trained, out, layout, train.batches(pairs, pad, hf.SEED), steps)
