// Compatibility entry point: the package's main module under its first name (`./translate.mjs`, as
// runtimes/README.md shows it). Opening and running an export lives in exported.mjs (Python's
// tfm_export/runtime/exported.py); existing imports of translate.mjs keep working.
export * from './exported.mjs';
