// A model with its output head restricted to a vocabulary shortlist (CTranslate2's use_vmap): Python's
// ExportedModel.with_shortlist and Shortlisted (tfm_export/runtime/exported.py) and GenerateMixin.shortlisted
// (tfm_export/runtime/api.py). The shortlisted model is a view of the model with `shortlist`, the sorted ids; a
// decode on it runs on its decoder cache masked to them (states/shortlist.mjs), through api.mjs's cacheFor.
// No globals beyond ECMAScript: the browser page may import this file too (through api.mjs).
import { runtimeGraphs } from './checks.mjs';
import { generationConfig } from './options/generation.mjs';
import { MaskedCache } from './states/shortlist.mjs';

/**
 * `cache` masked to the model's shortlist, with the call's forced first token (`config`'s: a target language)
 * added, as Python's Shortlisted.cache_for adds it.
 */
export function maskedCache(cache, model, config = null) {
  const c = model.manifest.config;
  const forced = config?.forcedBosTokenId ?? null;
  const ids = forced === null || model.shortlist.includes(forced) ? model.shortlist : [...model.shortlist, forced];
  return new MaskedCache(cache, ids, c.tgt_vocab_size, c.suppress_ids ?? []);
}

/**
 * The model with its output head restricted to `ids` and the model's own tokens (EOS, the decoder start, the
 * manifest's forced first token): Python's ExportedModel.with_shortlist, on states/shortlist.mjs's masked logits.
 * The model itself is unchanged: the result is a view of it (its methods decode on the shortlist) with `shortlist`,
 * the sorted ids.
 */
export function withShortlist(model, ids) {
  const c = model.manifest.config;
  const forced = generationConfig(model.manifest, {}).forcedBosTokenId;
  const all = [...new Set([c.eos_id, c.bos_id, ...(forced === null ? [] : [forced]), ...Array.from(ids, Number)])];
  if (all.some((id) => !Number.isInteger(id) || id < 0 || id >= c.tgt_vocab_size)) {
    throw new Error(`a shortlist id is out of range for a vocabulary of ${c.tgt_vocab_size} ids`);
  }
  if (runtimeGraphs(model.manifest).decoder !== 'decoder') {
    throw new Error('a vocabulary shortlist needs an export with a cached decoder (decoder.onnx)');
  }
  return Object.assign(Object.create(model), { shortlist: all.sort((a, b) => a - b) });
}

/** `withShortlist` of the sources' tokens under the model's `vmap` (decode/vmap.mjs): Python's `shortlisted`. */
export function shortlisted(model, sources) {
  if (!model.vmap) {
    throw new Error('useVmap needs a vocabulary map: set model.vmap = await loadVocabularyMap(path) (or a VocabularyMap)');
  }
  return withShortlist(model, model.vmap.shortlist(sources));
}
