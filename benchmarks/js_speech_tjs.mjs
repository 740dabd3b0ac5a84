// transformers.js' side of js_speech.py (#43), shared by the Node worker (js_speech_node.mjs) and the browser
// page (js_speech_page.mjs, which gets this file as /tjs-run.mjs): a transcriber over an ASR pipeline that
// also returns the generated ids (its model.generate wrapped), without the prompt and the final EOS.

/** asr: a transformers.js automatic-speech-recognition pipeline -> async (samples, language, maxNewTokens)
 *  -> { ms, text, ids }; ms times the pipeline's call on the samples (features, encoder, decoder, text). */
export function tjsTranscriber(asr) {
  const generate = asr.model.generate.bind(asr.model);
  let sequence = null;
  asr.model.generate = async (args) => {
    const out = await generate(args);
    sequence = out.tolist()[0].map(Number);
    return out;
  };
  const config = asr.model.generation_config;
  return async (samples, language, maxNewTokens) => {
    const options = { language, task: 'transcribe', return_timestamps: false };
    if (maxNewTokens) options.max_new_tokens = maxNewTokens;
    const start = performance.now();
    const { text } = await asr(samples, options);
    const ms = performance.now() - start;
    const prompt = asr.model._retrieve_init_tokens({ ...config, language, task: 'transcribe',
      return_timestamps: false });
    const ids = sequence.slice(prompt.length);
    if (ids.at(-1) === config.eos_token_id) ids.pop();
    return { ms, text, ids };
  };
}
