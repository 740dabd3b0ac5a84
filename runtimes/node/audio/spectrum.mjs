// Power spectra |rfft(frame)|^2 of real frames, for audio/features.mjs's log-mel features: one function per
// frame length, called for every frame (3000 a Whisper window), with its tables and buffers made once.
// - a power of two: fft.js's real transform (radix 4);
// - lengths whose prime factors are all at most 7 (Whisper's n_fft 400 = 2^4 5^2): a mixed-radix
//   complex FFT (kissfft's recursive decimation in time) of half the length on the even and odd samples
//   as real and imaginary parts, split into the real frame's spectrum; about 4x less work per frame
//   than Bluestein's two power-of-two transforms of over twice the length, and no less accurate;
// - any other length: Bluestein's chirp-z transform, a length-N DFT as one convolution by fft.js at the
//   next power of two >= 2N - 1.
// No globals beyond ECMAScript: a page can import it (fft.js is CommonJS: through a bundler, or an import
// map to an ES module build of it).
import FFT from 'fft.js';

const MAX_RADIX = 7; // larger prime factors: Bluestein (a radix-p butterfly costs p^2 per p outputs)

const isPowerOfTwo = (n) => n > 1 && (n & (n - 1)) === 0;

/** n's radices, 4s first, then 2, 3, 5, 7 (each a butterfly below); null if a prime factor is larger. */
function radices(n) {
  const out = [];
  for (const r of [4, 2, 3, 5, 7]) while (n % r === 0) { out.push(r); n /= r; }
  return n === 1 ? out : null;
}

/** A power spectrum of a real frame: fft.js directly at a power-of-two length. */
function directPower(n) {
  const fft = new FFT(n);
  const out = fft.createComplexArray();
  const input = new Float64Array(n);
  const power = new Float64Array(n / 2 + 1);
  return (frame) => {
    input.set(frame);
    fft.realTransform(out, input);
    for (let k = 0; k <= n / 2; k++) power[k] = out[2 * k] ** 2 + out[2 * k + 1] ** 2;
    return power;
  };
}

/** Radix 4 in place on out[at + k + q sub] (q = 0..3), already twiddled: X_s = sum_q t_q (-i)^(q s). */
function radix4(re, im, i0, sub) {
  const [i1, i2, i3] = [i0 + sub, i0 + 2 * sub, i0 + 3 * sub];
  const a0r = re[i0] + re[i2]; const a0i = im[i0] + im[i2];
  const a1r = re[i0] - re[i2]; const a1i = im[i0] - im[i2];
  const b0r = re[i1] + re[i3]; const b0i = im[i1] + im[i3];
  const b1r = re[i1] - re[i3]; const b1i = im[i1] - im[i3];
  re[i0] = a0r + b0r; im[i0] = a0i + b0i;
  re[i1] = a1r + b1i; im[i1] = a1i - b1r;
  re[i2] = a0r - b0r; im[i2] = a0i - b0i;
  re[i3] = a1r - b1i; im[i3] = a1i + b1r;
}

/** Radix 2 in place on (i0, i0 + sub), already twiddled. */
function radix2(re, im, i0, sub) {
  const i1 = i0 + sub;
  const xr = re[i1];
  const xi = im[i1];
  re[i1] = re[i0] - xr; im[i1] = im[i0] - xi;
  re[i0] += xr; im[i0] += xi;
}

const [C1, C2, S1, S2] = [Math.cos(0.4 * Math.PI), Math.cos(0.8 * Math.PI), Math.sin(0.4 * Math.PI), Math.sin(0.8 * Math.PI)];

/** Radix 5 in place on (i0 + q sub), already twiddled; X_4 and X_3 are X_1's and X_2's mirror terms. */
function radix5(re, im, i0, sub) {
  const [i1, i2, i3, i4] = [i0 + sub, i0 + 2 * sub, i0 + 3 * sub, i0 + 4 * sub];
  const a1r = re[i1] + re[i4]; const a1i = im[i1] + im[i4];
  const a2r = re[i2] + re[i3]; const a2i = im[i2] + im[i3];
  const b1r = re[i1] - re[i4]; const b1i = im[i1] - im[i4];
  const b2r = re[i2] - re[i3]; const b2i = im[i2] - im[i3];
  const m1r = re[i0] + C1 * a1r + C2 * a2r; const m1i = im[i0] + C1 * a1i + C2 * a2i;
  const m2r = re[i0] + C2 * a1r + C1 * a2r; const m2i = im[i0] + C2 * a1i + C1 * a2i;
  const n1r = S1 * b1r + S2 * b2r; const n1i = S1 * b1i + S2 * b2i;
  const n2r = S2 * b1r - S1 * b2r; const n2i = S2 * b1i - S1 * b2i;
  re[i0] += a1r + a2r; im[i0] += a1i + a2i;
  re[i1] = m1r + n1i; im[i1] = m1i - n1r; // X_s = m - i n, X_(5-s) = m + i n
  re[i4] = m1r - n1i; im[i4] = m1i + n1r;
  re[i2] = m2r + n2i; im[i2] = m2i - n2r;
  re[i3] = m2r - n2i; im[i3] = m2i + n2r;
}

/**
 * The input order of a decimation-in-time FFT of length m = product of `factors` (kissfft's recursion:
 * position at + q sub + ... of the output's work array reads input from + q stride + ...).
 */
function digitOrder(m, factors) {
  const order = new Int32Array(m);
  const visit = (from, stride, at, len, level) => {
    if (len === 1) { order[at] = from; return; }
    const sub = len / factors[level];
    for (let q = 0; q < factors[level]; q++) visit(from + q * stride, stride * factors[level], at + q * sub, sub, level + 1);
  };
  visit(0, 1, 0, m, 0);
  return order;
}

/**
 * The complex DFT of length m = product of `factors` (each <= MAX_RADIX), as a function (re, im, outRe,
 * outIm) writing the spectrum of (re, im). Decimation in time without recursion: the inputs in digit order,
 * then one pass per radix, the last factor's first: in each block of len values, each k < len / r
 * twiddles its r values by exp(-2 pi i q k / len) and combines them by a radix-r butterfly, in place;
 * every root comes from one table of the m roots of unity.
 */
function mixedRadix(m, factors) {
  const cos = Float64Array.from({ length: m }, (_, j) => Math.cos((2 * Math.PI * j) / m));
  const sin = Float64Array.from({ length: m }, (_, j) => -Math.sin((2 * Math.PI * j) / m));
  const order = digitOrder(m, factors);
  const [tRe, tIm] = [new Float64Array(MAX_RADIX), new Float64Array(MAX_RADIX)];
  const generic = (re, im, i0, sub, r) => { // X[k + s sub] = sum_q t_q exp(-2 pi i q s / r)
    for (let q = 0; q < r; q++) { tRe[q] = re[i0 + q * sub]; tIm[q] = im[i0 + q * sub]; }
    for (let s = 0; s < r; s++) {
      let sr = tRe[0];
      let si = tIm[0];
      for (let q = 1; q < r; q++) {
        const w = ((q * s) % r) * (m / r);
        sr += tRe[q] * cos[w] - tIm[q] * sin[w];
        si += tRe[q] * sin[w] + tIm[q] * cos[w];
      }
      re[i0 + s * sub] = sr;
      im[i0 + s * sub] = si;
    }
  };
  return (inRe, inIm, re, im) => {
    for (let p = 0; p < m; p++) { re[p] = inRe[order[p]]; im[p] = inIm[order[p]]; }
    for (let level = factors.length - 1, len = factors.at(-1); level >= 0; len *= factors[--level] ?? 1) {
      const r = factors[level];
      const sub = len / r;
      const unit = m / len; // exp(-2 pi i / len) is root `unit` of the table; q k unit < m
      for (let at = 0; at < m; at += len) {
        for (let k = 0; k < sub; k++) {
          for (let q = 1, i = at + sub + k; q < r; q++, i += sub) { // t_q = X_q[k] exp(-2 pi i q k / len)
            const w = q * k * unit;
            const xr = re[i];
            re[i] = xr * cos[w] - im[i] * sin[w];
            im[i] = xr * sin[w] + im[i] * cos[w];
          }
          if (r === 4) radix4(re, im, at + k, sub);
          else if (r === 2) radix2(re, im, at + k, sub);
          else if (r === 5) radix5(re, im, at + k, sub);
          else generic(re, im, at + k, sub, r);
        }
      }
    }
  };
}

/**
 * A power spectrum of a real frame of even length n = 2m, m's prime factors <= MAX_RADIX: z_j = x_2j +
 * i x_(2j+1), Z = DFT_m(z), then X_k = E_k + exp(-2 pi i k / n) O_k with E_k = (Z_k + conj Z_(m-k)) / 2
 * and O_k = (Z_k - conj Z_(m-k)) / 2i, for k = 0 .. m (Z_m = Z_0).
 */
function splitRealPower(n, factors) {
  const m = n / 2;
  const dft = mixedRadix(m, factors);
  const [zRe, zIm, fRe, fIm] = [0, 0, 0, 0].map(() => new Float64Array(m));
  const cos = Float64Array.from({ length: m + 1 }, (_, k) => Math.cos((2 * Math.PI * k) / n));
  const sin = Float64Array.from({ length: m + 1 }, (_, k) => -Math.sin((2 * Math.PI * k) / n));
  const power = new Float64Array(m + 1);
  return (frame) => {
    for (let j = 0; j < m; j++) {
      zRe[j] = frame[2 * j];
      zIm[j] = frame[2 * j + 1];
    }
    dft(zRe, zIm, fRe, fIm);
    for (let k = 0; k <= m; k++) {
      const a = k === m ? 0 : k;
      const b = k === 0 ? 0 : m - k;
      const eRe = (fRe[a] + fRe[b]) / 2;
      const eIm = (fIm[a] - fIm[b]) / 2;
      const oRe = (fIm[a] + fIm[b]) / 2;
      const oIm = (fRe[b] - fRe[a]) / 2;
      const xRe = eRe + oRe * cos[k] - oIm * sin[k];
      const xIm = eIm + oRe * sin[k] + oIm * cos[k];
      power[k] = xRe * xRe + xIm * xIm;
    }
    return power;
  };
}

/** An odd length with small prime factors: the complex DFT of the frame (imaginary parts 0). */
function complexPower(n, factors) {
  const dft = mixedRadix(n, factors);
  const [zeros, fRe, fIm] = [0, 0, 0].map(() => new Float64Array(n));
  const power = new Float64Array(Math.floor(n / 2) + 1);
  return (frame) => {
    dft(frame, zeros, fRe, fIm);
    for (let k = 0; k < power.length; k++) power[k] = fRe[k] * fRe[k] + fIm[k] * fIm[k];
    return power;
  };
}

/**
 * A power spectrum of a real frame of any length n (Bluestein): X_k = conj(b_k) * sum_j (x_j conj(b_j))
 * b_(k-j) with b_m = exp(i pi m^2 / n), the sum a circular convolution of size m >= 2n - 1 by fft.js.
 */
function bluesteinPower(n) {
  let size = 1;
  while (size < 2 * n - 1) size *= 2;
  const fft = new FFT(size);
  // m^2 mod 2n keeps the angle small, hence exact to float64 rounding
  const angles = Float64Array.from({ length: n }, (_, m) => (Math.PI * ((m * m) % (2 * n))) / n);
  const [cos, sin] = [angles.map(Math.cos), angles.map(Math.sin)];
  const kernel = new Float64Array(2 * size); // b_m at m and at size - m (the convolution's negative lags)
  for (let m = 0; m < n; m++) {
    for (const at of m === 0 ? [0] : [m, size - m]) [kernel[2 * at], kernel[2 * at + 1]] = [cos[m], sin[m]];
  }
  const kernelFft = fft.createComplexArray();
  fft.transform(kernelFft, kernel);
  const a = new Float64Array(2 * size); // [2n, 2 size) stay zero
  const spectrum = fft.createComplexArray();
  const conv = fft.createComplexArray();
  const power = new Float64Array(Math.floor(n / 2) + 1);
  return (frame) => {
    for (let j = 0; j < n; j++) {
      a[2 * j] = frame[j] * cos[j];
      a[2 * j + 1] = -frame[j] * sin[j];
    }
    fft.transform(spectrum, a);
    for (let i = 0; i < 2 * size; i += 2) {
      const [re, im] = [spectrum[i], spectrum[i + 1]];
      spectrum[i] = re * kernelFft[i] - im * kernelFft[i + 1];
      spectrum[i + 1] = re * kernelFft[i + 1] + im * kernelFft[i];
    }
    fft.inverseTransform(conv, spectrum);
    // |conj(b_k) * conv_k|^2 = |conv_k|^2: the outer chirp has modulus 1
    for (let k = 0; k < power.length; k++) power[k] = conv[2 * k] ** 2 + conv[2 * k + 1] ** 2;
    return power;
  };
}

/**
 * frame (n real values, n >= 2) -> its power spectrum |rfft|^2 (floor(n / 2) + 1 values), float64, in
 * an array that the next call overwrites. `method` (tests): 'fft.js', 'mixed' or 'bluestein' instead
 * of the one for n.
 */
export function powerSpectrum(n, method = null) {
  const small = n % 2 === 0 ? radices(n / 2) : radices(n);
  const chosen = method ?? (isPowerOfTwo(n) ? 'fft.js' : small ? 'mixed' : 'bluestein');
  if (chosen === 'fft.js') return directPower(n);
  if (chosen === 'bluestein') return bluesteinPower(n);
  if (!small) throw new Error(`${n} has a prime factor over ${MAX_RADIX}: no mixed-radix transform`);
  return n % 2 === 0 ? splitRealPower(n, small) : complexPower(n, small);
}
