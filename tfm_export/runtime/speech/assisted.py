"""Speculative greedy decoding of Whisper's windows: `transcribe(..., assistant=, prompt_lookup_num_tokens=)`.
Torch-free.

A greedy window (temperature 0, one beam) decodes through runtime.decode.speculative.speculate, the text
models' loop, rather than through runtime.decode.loop with a WhisperStrategy: a proposer drafts (prompt lookup
over the window's decoder input, whose conditioning text repeats what the last window said, or a draft export
of the same tokenizer, a smaller Whisper or the model's own int8 variant) and the model checks each draft in one
decoder step. The check is runtime.decode.checking.ProcessorCheck with Whisper's processors
(runtime.speech.rules.whisper_processors: begin_suppress_tokens, suppress_tokens, the timestamp rules), the list
the WhisperStrategy's TokenPicker runs: each drafted position is processed with the ids before it, so the
timestamp pairing and ordering rules hold as they do one id at a time, and the ids are plain greedy's.

The window's forced prompt is fed in the first decoder step (the plain loop feeds it one id a step); its
<|startoftranscript|> position's logits give <|nospeech|>'s probability, and the kept ids' log-probabilities
the row's avg_logprob, as WhisperStrategy's rows (`WhisperRow`): the temperature fallback and the segments
read the same fields (equal up to float rounding: the positions come from one call over several ids).
Sampled tries (the fallback's temperatures above 0) decode as they always did. Speculation runs on the export's
own growing cache (runtime.exported.ExportedModel.checking_cache); a server's window batch does not speculate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...errors import InputError
from ..decode import speculative
from ..decode.checking import ProcessorCheck
from ..decode.loop import DecoderCache
from ..options.generation import GenerationConfig
from .prompt import WhisperSettings, max_new_tokens
from .rules import no_speech_prob, whisper_processors
from .search import DETECT, WhisperRow

log = logging.getLogger(__name__)

WindowDecoder = Callable[..., WhisperRow]  # runtime.speech.longform.window_decoder's decode_window


@dataclass
class Assisted:
    """What a speculative window needs: the model's checking cache, its config and tokenizer, the decoding
    settings (prompt_lookup_num_tokens / num_assistant_tokens) and the assistant (an opened export, or None for
    prompt lookup); `policies`: the model's draft-length policies, kept across windows and calls."""

    cache: DecoderCache
    model_config: Any  # TransformerConfig
    tokenizer: dict | None
    config: GenerationConfig
    assistant: Any | None
    policies: dict = field(default_factory=dict)
    stats: speculative.Speculation = field(default_factory=speculative.Speculation)  # summed over the windows

    def row(self, window: np.ndarray, prompt: list[int], steps: int, settings: WhisperSettings,
            timestamps: bool, forced: int = 0) -> WhisperRow:
        """One greedy window's WhisperRow (runtime.speech.search._picked_rows' fields), decoded speculatively."""
        if DETECT in prompt:
            raise InputError("speculative decoding needs the language first (detected before the window decodes)")
        rules = whisper_processors(settings, len(prompt) - forced, timestamps)
        check = ProcessorCheck(self.config.replace(do_sample=False, temperature=1.0), settings.eos_token_id, steps,
                               processors=rules)
        proposer, policy = speculative.proposal(self.config, self.model_config, self.tokenizer, self.assistant,
                                                self.policies)
        stats = speculative.Speculation()
        ids = speculative.speculate(self.cache, np.ascontiguousarray(window)[None], proposer, policy, steps,
                                    self.model_config, stats=stats, check=check, prompt=prompt)
        self.stats.calls += stats.calls
        self.stats.drafted += stats.drafted
        self.stats.accepted += stats.accepted
        return _row(prompt, ids, stats.ended, check, settings)


def _row(prompt: list[int], ids: list[int], ended: bool, check: ProcessorCheck, settings: WhisperSettings
         ) -> WhisperRow:
    """The WhisperRow TokenPicker and WhisperStrategy would make: sums accumulated id by id as theirs."""
    total, steps = 0.0, []
    for logprob in check.logprobs:
        after = total + logprob
        steps.append(after - total)
        total = after
    n = len(check.logprobs)
    sot = prompt.index(settings.decoder_start_token_id) if settings.decoder_start_token_id in prompt else -1
    no_speech = None
    if settings.no_timestamps_token_id is not None and sot >= 0 and check.first is not None:
        no_speech = float(no_speech_prob(check.first[sot][None], settings)[0])
    return WhisperRow(ids, ended, list(prompt), no_speech, total / n if n else float("nan"), total, tuple(steps))


def speculating(model: Any, config: GenerationConfig, assistant: Any | None, runner: Any | None
                ) -> Assisted | None:
    """The Assisted decoding a transcribe call asks for (None: no speculation: none asked, or the export's
    decoder cannot check drafts, logged); one InputError where it cannot be: beam search, a server's runner."""
    if not speculative.wanted(config, assistant):
        return None
    if config.num_beams > 1:
        raise InputError(f"speculative decoding (an assistant, prompt lookup) is greedy decoding's, not beam "
                         f"search's ({config.num_beams} beams): transcribe with num_beams 1")
    if runner is not None:
        raise InputError("speculative decoding runs on the export's own cache, not on a window batch (a server's "
                         "runner): leave out the assistant and prompt lookup")
    cache = model.checking_cache()
    if cache is None:
        log.warning("this export's decoder returns only the last position's logits (exported before "
                    "earlier_logits): transcribing without speculation (the same ids)")
        return None
    tokenizer = getattr(model.manifest, "tokenizer", None)
    return Assisted(cache, model.config, tokenizer, config, assistant, model.draft_lengths)


def assisted_decoder(plain: WindowDecoder, assisted: Assisted | None, settings: WhisperSettings,
                     config: GenerationConfig, timestamps: bool, max_target_positions: int) -> WindowDecoder:
    """`plain` (longform.window_decoder's decode_window) with its greedy tries decoded speculatively by
    `assisted` (None: `plain` itself); a sampled try (temperature > 0) stays `plain`'s."""
    if assisted is None:
        return plain

    def decode_window(window: np.ndarray, prompt: list[int], temperature: float, forced: int = 0) -> WhisperRow:
        if temperature > 0.0:
            return plain(window, prompt, temperature, forced)
        steps = max_new_tokens(settings, len(prompt), config.max_new_tokens, max_target_positions)
        return assisted.row(window, list(prompt), steps, settings, timestamps, forced)

    return decode_window
