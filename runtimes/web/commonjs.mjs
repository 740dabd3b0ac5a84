// CommonJS libraries as ES modules, without a bundler. Whisper transcription (/lib/audio/spectrum.mjs,
// /lib/audio/io.mjs) imports fft.js and wavefile by their npm names, as Node does; both ship only CommonJS
// (module.exports), which a browser cannot import. index.html's import map points each name at a shim
// (fft-shim.mjs, wavefile-shim.mjs) that runs the library's file served at /npm/ with a `module` of its own.

/** The `module.exports` of the CommonJS file at `url` (npm package `name`, for the error line). */
export async function loadCommonJs(url, name) {
  const res = await fetch(url);
  if (!res.ok) {
    throw new Error(`${name} is not served (${url}: HTTP ${res.status}); transcription needs it: ` +
      'run `npm ci` in runtimes/node and restart `tfm-export serve-web`');
  }
  const module = { exports: {} };
  // Function, not eval: the file sees only its own module/exports, as Node's module wrapper gives it.
  new Function('module', 'exports', `${await res.text()}\n//# sourceURL=${url}`)(module, module.exports);
  return module.exports;
}
