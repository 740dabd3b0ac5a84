"""Export options declared once (export.options): every `export` flag of an ExportOptions field comes from its
declaration, with its help; a rule between options refuses the same mix, in the same words, through the Python
API and through the CLI; the encoder input kinds are one table (config.SOURCE_KINDS) that the per-layer tables
keyed by kind cover."""

from __future__ import annotations

import dataclasses

import pytest

from helpers import run_cli
from tfm_export.cli import cli
from tfm_export.cli.common import cli_option
from tfm_export.config import SOURCE_KINDS, SOURCES
from tfm_export.export.int4 import Int4Settings
from tfm_export.export.options import NAMES, OPTIONS, RULES, ExportOptions, OptionsError, module_options
from tfm_export.runtime.options.spec import render_help


def test_every_export_flag_of_a_field_comes_from_its_declaration():
    params = {p.name: p for p in cli.commands["export"].params}
    declared = [o for o in OPTIONS if o.cli]
    assert {o.name for o in OPTIONS} == {f.name for f in dataclasses.fields(ExportOptions)}
    for o in declared:
        param = params[o.name]
        assert param.opts == [o.flag] and o.help and param.help == render_help(o.help, lambda n: NAMES[n].flag)
        assert param.default == o.default, o.name
    # The fields without a flag of their own: int4's are Int4Settings' fields (--int4-<field>)
    assert [o.name for o in OPTIONS if not o.cli] == ["int4"]
    assert {f"int4_{f.name}" for f in dataclasses.fields(Int4Settings)} <= set(params)
    # The flags in declaration order, right after --out
    names = [p.name for p in cli.commands["export"].params]
    assert names[names.index("out") + 1: names.index("out") + 1 + len(declared)] == [o.name for o in declared]


def test_validate_takes_the_declared_atol():
    atol = next(p for p in cli.commands["validate"].params if p.name == "atol")
    assert atol.opts == ["--atol"] and atol.default == NAMES["atol"].default and atol.type.min_open


# (ExportOptions fields, the same as export flags, what the refusal says on the CLI)
MIXES = [
    ({"dtype": "float16", "quantize": "int4"}, ["--dtype", "float16", "--quantize", "int4"],
     "--dtype float16 (CUDA) and --quantize int4 (CPU) cannot be combined; pick one"),
    ({"int4": Int4Settings(block_size=64)}, ["--int4-block-size", "64"],
     "the --int4-* options apply to --quantize int4 only; add it or drop them"),
    ({"quantize": "int4", "int4": Int4Settings(method="gptq")}, ["--quantize", "int4", "--int4-method", "gptq"],
     "--int4-method gptq needs --calibration-file"),
    ({"quantize": "int4", "calibration_file": "{file}"}, ["--quantize", "int4", "--calibration-file", "{file}"],
     "--calibration-file is read by --int4-method gptq only; add it or drop the file"),
    ({"eval_file": "{file}", "validate": False}, ["--eval-file", "{file}", "--no-validate"],
     "--eval-file is scored by the validation: drop --no-validate"),
    ({"max_quality_drop": 1.0}, ["--max-quality-drop", "1"],
     "--max-quality-drop compares a reduced-precision export with its float32 graphs: add --quantize, "
     "--dtype float16 or --optimize"),
    ({"quantize": "int8", "max_quality_drop": 1.0, "validate": False},
     ["--quantize", "int8", "--max-quality-drop", "1", "--no-validate"],
     "--max-quality-drop is checked by the validation: drop --no-validate"),
]


def test_every_rule_has_a_case():
    refused = {next(i for i, rule in enumerate(RULES) if rule.refuses(_options(fields, "x")))
               for fields, _, _ in MIXES if _refused(fields)}
    assert refused == set(range(len(RULES)))


def _options(fields: dict, file: str) -> ExportOptions:
    """An unchecked ExportOptions (to ask each rule), the files named `file`."""
    options = object.__new__(ExportOptions)
    for f in dataclasses.fields(ExportOptions):
        value = fields.get(f.name, f.default)
        object.__setattr__(options, f.name, file if value == "{file}" else value)
    return options


def _refused(fields: dict) -> bool:
    try:
        ExportOptions(**{k: "x" if v == "{file}" else v for k, v in fields.items()})
    except OptionsError:
        return True
    return False


@pytest.mark.parametrize("fields, flags, message", MIXES, ids=[m[2][:40] for m in MIXES])
def test_a_rule_refuses_on_the_library_call_and_the_cli(fields, flags, message, tiny_checkpoint, tmp_path):
    file = tmp_path / "texts.tsv"
    file.write_text("1\teins\n")
    with pytest.raises(OptionsError) as caught:
        ExportOptions(**{k: str(file) if v == "{file}" else v for k, v in fields.items()})
    assert caught.value.render(cli_option).startswith(message)  # the CLI's words, from the library's data
    assert "--" not in str(caught.value) and "ExportOptions." in str(caught.value)  # the API's own
    result = run_cli(tiny_checkpoint, "-o", tmp_path / "out", *[str(file) if a == "{file}" else a for a in flags])
    assert result.exit_code == 1 and result.output == f"Error: {caught.value.render(cli_option)}\n", result.output
    assert not (tmp_path / "out").exists()


def test_field_bounds_refuse_in_the_library_as_on_the_cli(tiny_checkpoint, tmp_path):
    for fields, flags, cli_words in (({"atol": 0.0}, ["--atol", "0"], "x>0"),
                                     ({"static_slots": 1}, ["--static-slots", "1"], "x>=2"),
                                     ({"opset": 16}, ["--opset", "16"], "17<=x<=25")):
        with pytest.raises(OptionsError, match=f"^ExportOptions.{next(iter(fields))} "):
            ExportOptions(**fields)
        result = run_cli(tiny_checkpoint, "-o", tmp_path / "out", *flags)
        assert result.exit_code == 2 and cli_words in result.output, result.output


def test_static_slots_imply_the_static_cache():
    assert ExportOptions(static_slots=8).static_cache and not ExportOptions().static_cache


def test_a_module_export_takes_only_what_it_can_honour():
    assert module_options(ExportOptions(opset=19, force=True)) == {"opset": 19, "atol": 1e-4, "validate": True,
                                                                   "force": True}
    with pytest.raises(OptionsError) as caught:
        module_options(ExportOptions(quantize="int8", static_slots=8))
    assert caught.value.render(cli_option) == ("--adapter exports float32 graphs without a cache: drop --quantize, "
                                               "--static-slots N")


def test_the_source_kinds_are_one_table_the_layers_cover():
    from tfm_export.export.specs import encoder_input
    from tfm_export.export.validate import RANDOM_SOURCES
    from tfm_export.model.frontend import SOURCE_MASKS, SOURCE_MODULES

    assert SOURCES == tuple(SOURCE_KINDS) == ("tokens", "features", "frames")
    for table in (RANDOM_SOURCES, SOURCE_MASKS, SOURCE_MODULES):
        assert set(table) == set(SOURCES)
    from tfm_export.config import TransformerConfig

    config = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, source="frames", n_feats=5, share_embeddings=False)
    assert encoder_input(config).shape == ("batch", "src_len", 5) and encoder_input(config).name == "input_frames"


def test_the_checks_share_their_example_sources():
    """runtime.verify and export.decoding_checks draw from one function: ids never the padding id, in range."""
    from types import SimpleNamespace

    from tfm_export.config import TransformerConfig
    from tfm_export.runtime.sources import example_sources

    config = TransformerConfig(src_vocab_size=5, tgt_vocab_size=5, src_pad_id=0, tgt_pad_id=0, bos_id=1, eos_id=2)
    sources, origin = example_sources(SimpleNamespace(samples=None, config=config), None, seed=3, count=50)
    assert origin == "random" and len(sources) == 50
    assert {t for row in sources for t in row} == {1, 2, 3, 4}
    assert example_sources(SimpleNamespace(samples=["ab"], config=config), SimpleNamespace(encode=list))[0] == \
        [["a", "b"]]
