"""How to export and check a checkpoint (`ExportOptions`), each option declared once, and the rules between them.

Each field is declared with its flag, help, default, bounds and choices (export.option_spec.option); `OPTIONS`
reads them back. The `export` command's flags are generated from it (cli.export_cmd), the field checks and the
rules (`RULES`) run when an ExportOptions is made, so the CLI and the Python API refuse the same mixes with the
same words: an `OptionsError` names the options as data, spelled `ExportOptions.quantize 'int4'` here and
`--quantize int4` by the CLI. What needs the files or the model is checked later: the eval and calibration files
by `check_options` (before any model is loaded), the rest by the exporter. Torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import ExportError, api_option
from .int4 import Int4Settings
from .option_spec import ExportOption, option, options_of
from .quality import EvalSet, read_eval_file

# Opsets that torch 2.13's dynamo exporter writes as asked and ONNX Runtime 1.31 runs (17..25 checked
# end to end): below 17 it silently writes 18, so a manifest would claim an opset the graphs lack.
OPSETS = (17, 25)
DTYPES = ("float32", "float16")
QUANTIZE = ("int8", "int4")


@dataclass(frozen=True)
class ExportOptions:
    """How to export and check a checkpoint; checked on construction (one-line OptionsErrors)."""

    opset: int = option(18, f"ONNX opset version ({OPSETS[0]}..{OPSETS[1]}).",
                        f"is not supported: the exporter writes opsets {OPSETS[0]}..{OPSETS[1]}",
                        minimum=OPSETS[0], maximum=OPSETS[1], module=True)
    atol: float = option(1e-4, "Validation tolerance: max abs difference between ORT and eager outputs.",
                         exclusiveMinimum=0, module=True)
    # Compare ORT with eager before the folder is renamed into place.
    validate: bool = option(True, "Skip the ORT-vs-eager validation (not recommended).", module=True)
    force: bool = option(False, "Replace the output folder if it holds a previous export (never a folder with "
                                "other files).", module=True)
    optimize: bool = option(False, "Fuse the graphs for ONNX Runtime (attention with past, skip-layer-norm, GELU).")
    quantize: str | None = option(
        None, "Weights for CPU: int8 (dynamic int8 MatMuls) or int4 (4-bit MatMulNBits; the vocabulary head int8, "
              "or a scan with exact candidates when large: --int4-head); validation reports token agreement with "
              "float32.", choices=QUANTIZE)
    dtype: str = option("float32", "Weights and compute dtype; float16 is for CUDA (caches float16, logits float32).",
                        choices=DTYPES)
    # --quantize int4's settings (None: the defaults); their flags are Int4Settings' own (`--int4-<field>`).
    int4: Int4Settings | None = option(None, "The settings of {quantize} int4 (export.int4.Int4Settings).",
                                       flag="--int4-*", cli=False)
    # Also export decoder_static.onnx (pre-allocated cache, for CUDA graphs), and decoder_rows.onnx for float32.
    static_cache: bool = option(
        False, "Also export decoder_static.onnx (pre-allocated cache): CUDA replays each step as a graph, and "
               "`tfm-export serve` batches requests in flight with it (on CPU with decoder_rows.onnx, also exported "
               "for float32).", flag="--cuda-graph")
    static_slots: int | None = option(
        None, "Cache slots of decoder_static.onnx (default: max_len): the most tokens a row generates with it; "
              "fewer make every step cheaper (attention spans all slots). Implies {static_cache}.",
        minimum=2, implies="static_cache")
    # Weights in `<graph>.onnx.data` files beside each graph: forced by True, else when the parameters pass
    # shared.EXTERNAL_DATA_BYTES. Variants keep the layout of their float32 graphs.
    external_data: bool = option(
        False, "Keep each graph's weights in a GRAPH.onnx.data file beside it (automatic for models over 1.5 GB: "
               "protobuf holds 2 GB at most); variants keep their own data files.")
    # The held-out set of the quality report (export.quality); None: the checkpoint's sample texts, scored
    # against float32 only.
    eval_file: str | None = option(
        None, "Held-out set for the quality report: `source<TAB>reference` per line (for speech, an audio file's "
              "path relative to this file). A variant is scored against its float32 graphs and the references: "
              "chrF and BLEU, WER for speech (default: the checkpoint's sample texts).", file=True)
    max_quality_drop: float | None = option(
        None, "Fail the export (nothing written) when the variant loses more than POINTS of chrF against the "
              "references (against float32's outputs without them; WER points for speech).",
        metavar="POINTS", minimum=0)
    # Source texts that --int4-method gptq calibrates on (export.calibration).
    calibration_file: str | None = option(
        None, "Source texts like the model's real inputs, one a line (a TSV's first column is read), for "
              "--int4-method gptq: each is decoded once and what every layer reads on it weights the rounding. "
              "Never the held-out {eval_file}: a calibrated model would be scored on its own data.", file=True)

    def __post_init__(self) -> None:
        for item in OPTIONS:
            _check_field(item, getattr(self, item.name))
        for item in OPTIONS:  # --static-slots N is a static cache of N slots
            if item.implies and getattr(self, item.name) is not None:
                object.__setattr__(self, item.implies, True)
        for rule in RULES:
            if rule.refuses(self):
                raise OptionsError(rule.message, options=rule.named(self))

    @property
    def is_variant(self) -> bool:
        """True when the float32 graphs are transformed after export."""
        return self.dtype != "float32" or self.optimize or self.quantize is not None


OPTIONS: tuple[ExportOption, ...] = options_of(ExportOptions)  # every field's declaration, in field order
NAMES = {item.name: item for item in OPTIONS}


class OptionsError(ExportError):
    """Export options the library refuses, named as data (`{field}` and `options`, as every TfmExportError):
    `str()` spells them as the Python API has them (`ExportOptions.quantize 'int4'`, `ExportOptions.int4.method`),
    the CLI its flags (`--quantize int4`, `--int4-method`)."""

    def __str__(self) -> str:
        return self.render(api_name) if self.options else super().__str__()


INT4_FIELDS = {f.name for f in dataclasses.fields(Int4Settings)}


def api_name(key: str, value: Any = None) -> str:
    """An export option in the Python API's terms: ExportOptions' field, `int4_x` ExportOptions.int4's field x;
    another key (an import option) as errors.api_option names it."""
    if key.startswith("int4_") and key[5:] in INT4_FIELDS:
        field = f"ExportOptions.int4.{key[5:]}"
    elif key in NAMES:
        field = f"ExportOptions.{key}"
    else:
        return api_option(key, value)
    return field if value is None else f"{field} {value!r}"


def _check_field(item: ExportOption, value: Any) -> None:
    if item.accepts(value):
        return
    if item.kind == "choice":  # only the Python API gets here (Click's Choice refuses first): named by its flag,
        # as the callers that match these messages have always read it
        raise ExportError(f"{item.flag} {value} {item.requirement}")
    raise OptionsError(f"{{{item.name}}} {item.requirement}", options={item.name: value})


def _gptq(options: ExportOptions) -> bool:
    return options.quantize == "int4" and (options.int4 or Int4Settings()).method == "gptq"


@dataclass(frozen=True)
class Rule:
    """A mix of options that ExportOptions refuses: the `message` names options as `{field}`, shown as
    `named(options)` gives them (a value, or None for the option in general)."""

    refuses: Callable[[ExportOptions], bool]
    message: str
    named: Callable[[ExportOptions], Mapping[str, Any]]


# Checked in this order after every field's own check (so they compare values of the right types); each names
# what to change. Nothing is silently ignored: an option that would have no effect is refused.
RULES = (
    # int4 too: ORT runs float16 MatMulNBits (CPU and CUDA), but the quantisers here read float32 graphs.
    Rule(lambda o: o.dtype == "float16" and o.quantize is not None,
         "{dtype} (CUDA) and {quantize} (CPU) cannot be combined; pick one",
         lambda o: {"dtype": o.dtype, "quantize": o.quantize}),
    Rule(lambda o: o.int4 is not None and o.quantize != "int4",
         "the {int4} options apply to {quantize} only; add it or drop them",
         lambda o: {"int4": None, "quantize": "int4"}),
    Rule(lambda o: _gptq(o) and not o.calibration_file,
         "{int4_method} needs {calibration_file} (source texts like the model's inputs, one a line)",
         lambda o: {"int4_method": "gptq", "calibration_file": None}),
    Rule(lambda o: bool(o.calibration_file) and not _gptq(o),
         "{calibration_file} is read by {int4_method} only; add it or drop the file",
         lambda o: {"calibration_file": None, "int4_method": "gptq"}),
    Rule(lambda o: bool(o.eval_file) and not o.validate,
         "{eval_file} is scored by the validation: drop {validate}",
         lambda o: {"eval_file": None, "validate": False}),
    Rule(lambda o: o.max_quality_drop is not None and not o.is_variant,
         "{max_quality_drop} compares a reduced-precision export with its float32 graphs: add {quantize}, "
         "{dtype} or {optimize}", lambda o: {"max_quality_drop": None, "quantize": None, "dtype": "float16",
                                             "optimize": None}),
    Rule(lambda o: o.max_quality_drop is not None and not o.validate,
         "{max_quality_drop} is checked by the validation: drop {validate}",
         lambda o: {"max_quality_drop": None, "validate": False}),
)


def check_options(options: ExportOptions) -> tuple[EvalSet | None, tuple[str, ...] | None]:
    """What the options' files hold: the eval set and the calibration sources (None where not given), read
    before any model is loaded; an unreadable file, or an eval set that the options would leave unscored, is
    refused. (The options themselves were checked when `options` was made.)"""
    eval_set = read_eval_file(options.eval_file) if options.eval_file else None
    calibration = read_eval_file(options.calibration_file).sources if options.calibration_file else None
    if eval_set is not None and eval_set.references is None and not options.is_variant:
        raise OptionsError(f"{{eval_file}} {eval_set.origin} has sources only: a float32 export is scored against "
                           "references (add source<TAB>reference lines), its variants ({quantize}, {dtype}, "
                           "{optimize}) against float32 too",
                           options={"eval_file": None, "quantize": None, "dtype": "float16", "optimize": None})
    return eval_set, calibration


def module_options(options: ExportOptions) -> dict[str, Any]:
    """What an export of a user's module through its adapter takes of `options` (export.module_export's opset,
    atol, validate, force); the options it cannot honour, given, are refused: its graphs are float32, without
    a cache."""
    implied = {item.implies for item in OPTIONS if item.implies and getattr(options, item.name) is not None}
    given = [item.name for item in OPTIONS if not item.module and item.name not in implied
             and item.given(getattr(options, item.name))]
    if given:
        named = ", ".join(f"{{{name}}}" for name in given)
        raise OptionsError(f"{{adapter}} exports float32 graphs without a cache: drop {named}",
                           options={"adapter": None, **dict.fromkeys(given)})
    return {item.name: getattr(options, item.name) for item in OPTIONS if item.module}
