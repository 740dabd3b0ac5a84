"""Decoding options are declared once, as GenerationConfig's fields (runtime.options.generation, with
runtime.options.spec.option); every other list of them is derived or generated from OPTIONS. These fail
when a generated file is stale (`make options`) or when a surface's list drifts from the declarations."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import click
import jsonschema
import pytest

from tfm_export.cli import cli
from tfm_export.cli.common import CLI_FLAGS, CLI_VALUES
from tfm_export.errors import InputError
from tfm_export.importers import hf_generation
from tools import options_codegen
from tfm_export.runtime.options.generation import CHECKS, OPTIONS, RULES, GenerationConfig
from tfm_export.runtime.options.spec import camel
from tfm_export.serve.schemas import ACCEPTED, REQUEST_ONLY, TranslateRequest

ROOT = Path(__file__).resolve().parents[1]
FIELDS = [f.name for f in dataclasses.fields(GenerationConfig)]
BY_NAME = {o.name: o for o in OPTIONS}


def test_every_field_is_declared_once():
    assert [o.name for o in OPTIONS] == FIELDS
    assert all(o.help and o.help.endswith(".") for o in OPTIONS)
    assert [c[0] for c in CHECKS] == [o.name for o in OPTIONS if o.requirement] + [r[0] for r in RULES]
    assert {r[0] for r in RULES} <= set(FIELDS)


@pytest.mark.parametrize("path", list(options_codegen.TARGETS), ids=lambda p: p.name)
def test_generated_files_are_current(path):
    text = path.read_text(encoding="utf-8")
    assert options_codegen.TARGETS[path](text) == text, f"{path.relative_to(ROOT)} is stale: run `make options`"


def test_click_flags_are_the_cli_options():
    command = cli.commands["generate"]
    params = command.get_params(click.Context(command))
    decoding = {p.name: p for p in params if p.name in FIELDS}
    assert list(decoding) == [o.name for o in OPTIONS if o.cli]
    for name, param in decoding.items():
        assert BY_NAME[name].cli in param.opts
    assert all(p.help for p in params if isinstance(p, click.Option) and p.name != "help")
    # cli.common spells option keys in error messages: where it names a decoding flag, the same one
    for key, flag in CLI_FLAGS.items():
        assert key not in BY_NAME or flag.split()[0] == BY_NAME[key].cli, key
    for (key, _), flag in CLI_VALUES.items():
        assert key not in BY_NAME or flag == BY_NAME[key].cli, key


def test_server_request_fields_are_the_server_options():
    assert [n for n in TranslateRequest.model_fields if n in FIELDS] == [o.name for o in OPTIONS if o.serve]
    assert set(ACCEPTED) - set(REQUEST_ONLY) <= set(FIELDS)  # what the server passes on as decoding options
    assert set(REQUEST_ONLY) & set(FIELDS) == {"max_new_tokens"}
    properties = TranslateRequest.model_json_schema()["properties"]
    for option in (o for o in OPTIONS if o.serve):
        value = properties[option.name]["anyOf"][0]
        assert {k: value[k] for k in option.serve_bounds} == option.serve_bounds, option.name


def test_manifest_schema_generation_section_is_the_fields():
    schema = json.loads((ROOT / "tfm_export" / "manifest.schema.json").read_text(encoding="utf-8"))
    section = schema["properties"]["generation"]["oneOf"][1]
    assert list(section["properties"]) == FIELDS
    jsonschema.validate(GenerationConfig().to_dict(), section)
    for option in OPTIONS:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({option.name: "x"}, section)


def node_module(script: str) -> dict:
    if shutil.which("node") is None:
        pytest.skip("SKIPPED: node not found")
    done = subprocess.run(["node", "--input-type=module", "-e", script], cwd=ROOT / "runtimes" / "node",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_node_options_are_the_fields_with_the_same_checks():
    """options/generation.mjs (generated) as Node reads it: names, defaults, flags, and each check's message for a
    bad value equal to Python's."""
    bad = {camel(o.name): "x" for o in OPTIONS if o.requirement}
    rules = [{"numBeams": 2, "numReturnSequences": 3}, {"numBeams": 2, "doSample": True}]
    script = f"""
    import {{ PYTHON_NAMES, DEFAULTS, CLI_FLAGS, generationConfig }} from './options/generation.mjs';
    const message = (options) => {{
      try {{ generationConfig({{}}, options); return null; }} catch (e) {{ return e.message; }}
    }};
    const bad = Object.entries({json.dumps(bad)}).map(([k, v]) => message({{ [k]: v }}));
    console.log(JSON.stringify({{ names: PYTHON_NAMES, defaults: DEFAULTS, flags: CLI_FLAGS, bad,
      rules: {json.dumps(rules)}.map(message) }}));
    """
    node = node_module(script)
    assert node["names"] == {camel(o.name): o.name for o in OPTIONS}
    # JSON drops maxNewTokens' undefined (unset); the other unset ones are null, like Python's None
    assert node["defaults"] == {camel(o.name): o.default for o in OPTIONS if o.requirement or o.default is not None}
    assert node["flags"] == {o.cli[2:]: [camel(o.name), ["true", "false", *o.choices] if o.choices else o.kind]
                             for o in OPTIONS if o.cli}
    for option, got in zip((o for o in OPTIONS if o.requirement), node["bad"]):
        with pytest.raises(InputError) as info:
            GenerationConfig(**{option.name: "x"})
        assert info.value.template == f"{{{option.name}}} {option.requirement}"
        assert got.startswith(f"{camel(option.name)} {option.requirement}") and got.endswith(", got x")
    for (name, _, requirement, _), got in zip(RULES, node["rules"]):
        assert got.startswith(f"{camel(name)} {options_codegen.camel_text(requirement)}, got")


def test_hf_generation_writes_only_known_options():
    """Every setting a Hugging Face folder may set (beam and sampling folders) becomes a declared option."""
    beam = {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "num_return_sequences": 2,
            "max_length": 40, "min_length": 3, "repetition_penalty": 1.2, "no_repeat_ngram_size": 3,
            "renormalize_logits": True, "forced_bos_token_id": 0, "forced_eos_token_id": 2}
    sampling = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 9, "min_new_tokens": 2}
    written = {}
    for generation in (beam, sampling):
        defaults = hf_generation.generation_defaults(generation, max_len=64, eos_id=2)
        assert defaults and set(defaults) <= set(FIELDS)
        written.update(defaults)
    assert set(written) == {o.name for o in OPTIONS if o.transformers} | {"forced_eos"}
    assert written["top_k"] == hf_generation.TRANSFORMERS_DEFAULTS["top_k"]
    assert set(hf_generation.TRANSFORMERS_DEFAULTS) <= {o.name for o in OPTIONS if o.transformers}
