// Compatibility entry point (`tfm-export-node/greedy`): the decoding module's first name. Existing
// imports of greedy.mjs keep working (decoding.mjs; the modules themselves mirror the Python runtime's).
export * from './decoding.mjs';
