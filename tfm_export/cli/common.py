"""Shared CLI pieces: the group, path routing, and library-error translation."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import logging
import os
import sys
from typing import Any, Callable

import click

from ..errors import TfmExportError


class OneLineUsageError(click.UsageError):
    """A usage error as one line, as every other error of the CLI (Click prints the usage and a hint above it):
    what is wrong, and where the command's help is. Exit code 2, Click's for usage errors."""

    def show(self, file: Any = None) -> None:
        where = f" (see `{self.ctx.command_path} --help`)" if self.ctx is not None else ""
        click.echo(f"Error: {self.format_message()}{where}", err=True)


def _one_line(exc: click.UsageError) -> click.UsageError:
    return exc if isinstance(exc, OneLineUsageError) else OneLineUsageError(exc.format_message(), exc.ctx)


class RoutingGroup(click.Group):
    """A group where an unknown first word that looks like a path means `export PATH`; usage errors of the
    group and its commands are one line (OneLineUsageError)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a command's options (parsed here) or its own checks
            raise _one_line(exc) from None

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            _refuse_misspelled_command(args[0], list(self.commands))
            args = ["export", *args]
        return super().resolve_command(ctx, args)


def _refuse_misspelled_command(word: str, commands: list[str]) -> None:
    """`genrate` is a typo, not a checkpoint: a bare word, no such path, close to a command name."""
    if any(ch in word for ch in "./\\") or os.path.lexists(word):
        return
    close = difflib.get_close_matches(word, commands, n=1, cutoff=0.6)
    if close:
        raise click.UsageError(f"no such command {word!r}; did you mean {close[0]!r}?")


@click.group(cls=RoutingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tfm-export")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main_group(verbose: int) -> None:
    """Export encoder-decoder Transformers to ONNX and run them with ONNX Runtime.

    `tfm-export MODEL.pt` is short for `tfm-export export MODEL.pt`.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.getLogger("tfm_export").setLevel(level)


def _export_flags() -> tuple[dict[str, str], dict[tuple[str, Any], str]]:
    """The export options whose flag is not spelled from their name (--cuda-graph, --no-validate, --int4-*), and
    each boolean's flag as a value (`{validate}` False is --no-validate), from their declaration."""
    from ..export.options import OPTIONS

    flags = {o.name: o.flag for o in OPTIONS if o.flag != f"--{o.name.replace('_', '-')}"}
    return flags, {(o.name, not o.default): o.flag for o in OPTIONS if o.kind == "boolean"}


EXPORT_FLAGS, EXPORT_VALUES = _export_flags()
# How the CLI spells the library's option keys (errors.TfmExportError.options) in messages.
CLI_FLAGS = {**EXPORT_FLAGS,"heads": "--heads N", "src_pad_id": "--src-pad-id N", "tgt_pad_id": "--tgt-pad-id N",
             "bos_id": "--bos-id N", "eos_id": "--eos-id N", "norm_first": "--norm-first/--norm-after",
             "activation": "--activation NAME", "max_len": "--max-len N", "layout": "--layout NAME",
             "config": "--config CONFIG.json", "model": "--model MODEL.pt",
             "trust_pickle": "--trust-pickle", "num_return_sequences": "--n-best N", "do_sample": "--sample",
             "static_slots": "--static-slots N", "frontend": "--frontend NAME", "fbank": "--fbank KEY=VALUE",
             "revision": "--revision REV", "token": "--token TOKEN"}
CLI_VALUES = {("norm_first", True): "--norm-first", ("norm_first", False): "--norm-after",
              ("do_sample", True): "--sample", **EXPORT_VALUES}


def cli_option(key: str, value: Any = None) -> str:
    """`heads` -> `--heads N`; with a value, the flag as the user typed it (`--max-len 31`)."""
    flag = CLI_FLAGS.get(key, f"--{key.replace('_', '-')}")
    if value is None:
        return flag
    return CLI_VALUES.get((key, value), f"{flag.split()[0]} {value}")


def library_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn library errors into one-line ClickExceptions (exit code 1, no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TfmExportError as exc:
            raise click.ClickException(exc.render(cli_option)) from None
        except BrokenPipeError:  # the reader left (`| head`): stop quietly, as other command-line tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            sys.exit(141)  # 128 + SIGPIPE, a shell's status for it
        except OSError as exc:  # reading or writing a user's file: the reason, not a traceback
            where = f": {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"{exc.strerror or exc}{where}") from None

    return wrapper


def parse_int_list(text: str, what: str) -> list[int]:
    """`"1,8"` or `"3 17 9"` -> [1, 8]; a clear usage error otherwise."""
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise click.BadParameter(f"{what} must be integers separated by spaces or commas, got {shown!r}")


def check_threads(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """Click callback: a thread count the runtime accepts (RuntimeOptions' limits), or None."""
    if value is None:
        return None
    from ..runtime.device import check_thread_count
    from ..errors import DeviceError

    try:
        return check_thread_count(value, "the thread count")
    except DeviceError as exc:
        raise click.BadParameter(str(exc)) from None


THREADS_HELP = "Intra-op threads for ONNX Runtime; default: ONNX Runtime's (one per physical core)."
# The commands whose --threads sets more than ONNX Runtime's threads (bench.bench: torch.set_num_threads and
# CTranslate2's intra_threads too), and its help there.
THREADS_HELP_BY_COMMAND = {
    "bench": "Intra-op threads for each backend measured (ONNX Runtime, eager PyTorch, CTranslate2); "
             "default: each library's own.",
}


class ThreadsOption(click.Option):
    """--threads, whose help names what the command it belongs to runs (known once help is shown)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = THREADS_HELP_BY_COMMAND.get(ctx.command.name or "", THREADS_HELP)
        return super().get_help_record(ctx)


def spin_beside(spin: bool, assistant: Any) -> bool:
    """--spin's value when a draft export (--assistant) may run beside the model: their sessions take turns, and a
    pool left spinning after the draft's run takes the cores of the model's check (docs/speech.md: a check 29 ms
    spinning, 9-10 ms not, on 2 cores), so an assistant turns spinning off unless --spin is given."""
    ctx = click.get_current_context(silent=True)
    given = ctx is not None and ctx.get_parameter_source("spin") is click.core.ParameterSource.COMMANDLINE
    return spin if assistant is None or given else False


def ort_thread_options(fn: Callable[..., Any] | None = None, spin: bool = True) -> Any:
    """--threads and --spin/--no-spin, shared by the commands that run ONNX Runtime (`spin`: its default)."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--spin/--no-spin", default=spin, show_default=True,
                          help="Let idle ORT threads spin between ops (--no-spin on shared or busy machines; "
                               "--assistant turns it off unless --spin is given).")(fn)
        return click.option("--threads", cls=ThreadsOption, type=int, default=None, callback=check_threads,
                            help=THREADS_HELP)(fn)
    return decorate(fn) if fn is not None else decorate


# What each extra brings that commands import (pyproject.toml's [project.optional-dependencies]).
EXTRAS = {"export": ("PyTorch", ("torch", "onnx", "onnxscript", "onnx_ir")), "ray": ("Ray Serve", ("ray",))}


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (none in a full install)."""
    return [m for m in EXTRAS[extra][1] if importlib.util.find_spec(m) is None]


def requires_extra(extra: str, command: str) -> None:
    """A one-line error naming the extra to install when its packages are missing (the runtime-only install).

    Commands call it first, so `tfm-export export x.pt` in a torch-free install says what to install
    rather than that x.pt is missing or that `import torch` failed.
    """
    missing = missing_modules(extra)
    if missing:
        raise click.ClickException(f"tfm-export {command} needs {EXTRAS[extra][0]} ({', '.join(missing)} not "
                                   f"installed): pip install 'tfm-export[{extra}]'")


def hub_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--revision and --token, for the commands whose model may be a Hugging Face Hub id."""
    fn = click.option("--token", default=None, metavar="TOKEN",
                      help="Hugging Face token for a gated or private Hub model (default: HF_TOKEN, or the one "
                           "`hf auth login` stored).")(fn)
    return click.option("--revision", default=None, metavar="REV",
                        help="Branch, tag or commit sha of a Hugging Face Hub id (default: main).")(fn)


def resolve_model_arg(model: Any, revision: str | None, token: str | None) -> Any:
    """A path as it is, a Hub id downloaded into the Hugging Face cache (importers.hub.resolve_model); says on
    stderr which was used. Returns the importers.hub.Resolved."""
    from ..importers.hub import resolve_model

    resolved = resolve_model(model, revision, token, progress=lambda line: click.echo(line, err=True))
    click.echo(resolved.note, err=True)
    return resolved
