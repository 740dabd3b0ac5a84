"""`serve --write-config` and the settings Ray ships to replicas (serve.ray_config), without Ray: every field
of ServeSettings survives settings_to_dict -> JSON -> settings_from_dict, whatever fields it has (the values
are made from the fields' types, so a field added later is covered without editing this test), and a
Whisper export's audio flags reach the config. tests/test_serve_ray.py deploys a written config."""

from __future__ import annotations

import dataclasses
import json
import types
import typing

import pytest

from helpers import run_cli_ok
from tfm_export.errors import InputError
from tfm_export.serve.engine import ServeSettings
from tfm_export.serve.ray_config import settings_from_dict, settings_to_dict

# Fields whose values ServeSettings checks against a list: another valid value. Every other field gets a
# value made from its type (changed_settings).
VALID = {"batching": "single", "device": "cuda:1"}


def changed(name: str, hint: typing.Any, default: typing.Any) -> typing.Any:
    """A value of type `hint` other than `default`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if name in VALID:
        return VALID[name]
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return changed(name, kinds[0], None)
    if dataclasses.is_dataclass(hint):
        return changed_settings(hint, hint() if default is None else default)
    if origin is tuple:
        items = [args[0]] * 2 if len(args) == 2 and args[1] is Ellipsis else list(args)
        return tuple(changed(f"{name}{n}", item, None) for n, item in enumerate(items))
    made = {bool: lambda: not default, int: lambda: (default or 0) + 3, float: lambda: (default or 0) + 1.5,
            str: lambda: f"the {name}"}
    assert hint in made, f"no value for {name}: {hint}; add one to VALID"
    return made[hint]()


def changed_settings(cls: type, base: typing.Any) -> typing.Any:
    hints = typing.get_type_hints(cls)
    return dataclasses.replace(base, **{f.name: changed(f.name, hints[f.name], getattr(base, f.name))
                                        for f in dataclasses.fields(cls) if f.init})


def test_every_field_survives_the_round_trip():
    default = ServeSettings("folder")
    settings = changed_settings(ServeSettings, default)
    for field in dataclasses.fields(ServeSettings):  # the test changes every field, nested ones too
        assert getattr(settings, field.name) != getattr(default, field.name), field.name
    for inner in dataclasses.fields(settings.engine):
        assert getattr(settings.engine, inner.name) != getattr(default.engine, inner.name), inner.name
    assert settings_from_dict(json.loads(json.dumps(settings_to_dict(settings)))) == settings
    assert settings_from_dict(settings_to_dict(default)) == default
    assert settings_from_dict({"folder": "folder"}) == default  # a field left out takes its default


def test_unknown_fields_are_named():
    with pytest.raises(InputError, match="unknown ServeSettings field.*max_upload_bytes.*write-config"):
        settings_from_dict({"folder": "x", "max_upload_bytes": 3})
    with pytest.raises(InputError, match="unknown EngineConfig field.*max_batches"):
        settings_from_dict({"folder": "x", "engine": {"max_batches": 3}})


def test_a_whisper_exports_audio_flags_reach_the_config(tmp_path):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "serve.yaml"
    run_cli_ok("serve", tmp_path / "whisper_onnx", "--write-config", path, "--replicas", 2, "--max-upload-mb", 4.5,
               "--max-audio-seconds", 90, "--audio-workers", 3, "--upload-dir", tmp_path, "--max-queue", 7,
               "--threads", 2)
    config = yaml.safe_load(path.read_text())
    settings = settings_from_dict(config["applications"][0]["args"])
    assert settings == dataclasses.replace(
        ServeSettings(str(tmp_path / "whisper_onnx"), threads=2, max_upload_mb=4.5, max_audio_seconds=90,
                      audio_workers=3, upload_dir=str(tmp_path)),
        engine=dataclasses.replace(ServeSettings("x").engine, max_queue=7, max_batch=16))
    assert config["applications"][0]["deployments"][0]["num_replicas"] == 2
