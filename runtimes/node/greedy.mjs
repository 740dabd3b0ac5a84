// Compatibility entry point: the decoding loop moved to decoding.mjs (greedy, beam search, sampling,
// streaming). Existing imports of greedy.mjs keep working.
export * from './decoding.mjs';
