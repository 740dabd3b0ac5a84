// Types of 'tfm-export-node/greedy' (greedy.mjs): the decoding module under its first name
// (decoding.mjs, decoding.d.ts).
export * from './decoding.js';
