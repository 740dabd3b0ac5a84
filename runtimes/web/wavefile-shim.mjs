// `import * as wavefile from 'wavefile'` in the browser (index.html's import map): see commonjs.mjs.
// wavefile's UMD build sets exports.WaveFile; /lib/audio/io.mjs reads that named export.
import { loadCommonJs } from './commonjs.mjs';

const wavefile = await loadCommonJs('/npm/wavefile/wavefile.js', 'wavefile');
export const { WaveFile } = wavefile;
export default wavefile;
