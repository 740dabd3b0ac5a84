// A transcription as subtitles: SubRip and WebVTT cues of its segments, the port of
// tfm_export/runtime/speech/subtitles.py (Python's --format srt|vtt). No Node APIs: the browser page imports it.

/** Seconds as HH:MM:SS<decimal>mmm (negative times as 0). The segments' times are rounded to the millisecond
 * already, so rounding half up here gives Python's round-half-even result. */
function clock(seconds, decimal) {
  let millis = Math.round(Math.max(seconds, 0) * 1000);
  const hours = Math.floor(millis / 3_600_000);
  millis -= hours * 3_600_000;
  const minutes = Math.floor(millis / 60_000);
  millis -= minutes * 60_000;
  const pad = (n, width) => String(n).padStart(width, '0');
  return `${pad(hours, 2)}:${pad(minutes, 2)}:${pad(Math.floor(millis / 1000), 2)}${decimal}${pad(millis % 1000, 3)}`;
}

/** SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, the text, a blank line. */
export function toSrt(segments) {
  return segments.map((s, i) => `${i + 1}\n${clock(s.start, ',')} --> ${clock(s.end, ',')}\n${s.text.trim()}\n\n`).join('');
}

/** WebVTT: the header, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm` and their text. */
export function toVtt(segments) {
  return `WEBVTT\n\n${segments.map((s) => `${clock(s.start, '.')} --> ${clock(s.end, '.')}\n${s.text.trim()}\n\n`).join('')}`;
}
