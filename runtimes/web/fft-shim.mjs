// `import FFT from 'fft.js'` in the browser (index.html's import map): see commonjs.mjs.
import { loadCommonJs } from './commonjs.mjs';

export default await loadCommonJs('/npm/fft.js/fft.js', 'fft.js');
