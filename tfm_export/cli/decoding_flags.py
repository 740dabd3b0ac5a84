"""`generate`'s decoding flags, one per option runtime.options.generation declares for the CLI (its flag, help,
type and bounds from the declaration), and the GenerationConfig that Click's values make."""

from __future__ import annotations

from typing import Any

import click

# The decoding flags' types by option kind. The library checks the values, so its messages name the flag
# (`--top-p 1.5 must be in (0, 1]`); an option it checks only when decoding (max_new_tokens) is checked
# here against its declared bounds instead.
CLICK_TYPES = {"integer": (int, click.IntRange), "number": (float, click.FloatRange)}
WORDS = {"true": True, "false": False}  # a boolean option with choices (early_stopping) takes these too


class GenerateCommand(click.Command):
    """`generate`: its decoding flags are made from runtime.options.generation.OPTIONS when first needed (parsing,
    --help), so that the other commands start without importing the runtime (numpy, onnxruntime)."""

    decoding_added = False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self.decoding_added:
            self.params.extend(decoding_flags())
            self.decoding_added = True
        return super().get_params(ctx)


def decoding_flags() -> list[click.Option]:
    """A flag per decoding option that the CLI takes (GenerationConfig; unset: the export's defaults)."""
    from ..runtime.options.generation import OPTIONS
    from ..runtime.options.spec import render_help

    flags = {o.name: o.cli or o.name for o in OPTIONS}  # how help texts name other options
    return [_flag(o, render_help(o.help, flags.__getitem__)) for o in OPTIONS if o.cli]


def _flag(option: Any, help: str) -> click.Option:
    if option.choices:
        words = click.Choice([*WORDS, *option.choices])
        return click.Option([option.cli, option.name], type=words, default=None, help=help,
                            callback=lambda ctx, param, value: WORDS.get(value, value))
    if option.kind == "boolean":
        return click.Option([f"{option.cli}/--no-{option.cli[2:]}", option.name], default=None, help=help)
    plain, ranged = CLICK_TYPES[option.kind]
    bounds = option.bounds
    kind = plain if option.requirement else ranged(
        min=bounds.get("minimum", bounds.get("exclusiveMinimum")), min_open="exclusiveMinimum" in bounds,
        max=bounds.get("maximum", bounds.get("exclusiveMaximum")), max_open="exclusiveMaximum" in bounds)
    return click.Option([option.cli, option.name], type=kind, default=None, help=help)


def generation_config(model: Any, options: dict[str, Any], greedy: bool) -> Any:
    """Click's values -> the GenerationConfig to decode with (None values: the export's default, or
    plain greedy's with --greedy)."""
    from ..runtime.options.generation import GREEDY, OPTIONS

    config = model.generation_config(GREEDY if greedy else None, **options)
    # A sampling flag without sampling would be ignored without a word (transformers only warns): refuse it.
    # A folder's own defaults may carry such settings; only the flags given here are checked.
    sampling = {o.name: o.cli for o in OPTIONS if o.transformers == "sampling" or o.name == "seed"}
    given = [sampling[k] for k, v in options.items() if v is not None and k in sampling and k != "do_sample"]
    if given and not config.do_sample:
        verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
        raise click.UsageError(f"{', '.join(given)} only {verb} to sampling; add --sample or drop {them}")
    return config
