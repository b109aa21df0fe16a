// Float samples as a 16-bit PCM WAV file (mono), the samples converted as the Python runtime's
// pcm16 does (kokoro_tvm/runtime/audio_file.py): clipped to full scale, times 32767 in float32,
// rounded half to even.

const HEADER_BYTES = 44;

/** `x` rounded to the nearest integer, halves to even (numpy's round). */
export function roundHalfEven(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** `samples` (floats, nominally -1..1) as 16-bit PCM. */
export function pcm16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const clipped = Math.min(1, Math.max(-1, samples[i]));
    out[i] = roundHalfEven(Math.fround(clipped * 32767));
  }
  return out;
}

/** A WAV file's bytes at `sampleRate` (the model's, `model.sampleRate`): RIFF, a 16-byte PCM fmt chunk (mono, 16 bits), then the data. */
export function wavBytes(samples, sampleRate) {
  if (!Number.isInteger(sampleRate) || sampleRate <= 0) {
    throw new RangeError(`a WAV file needs a sample rate in Hz (the model's: model.sampleRate), ` +
                         `not ${sampleRate}`);
  }
  const pcm = pcm16(samples);
  const bytes = new ArrayBuffer(HEADER_BYTES + pcm.byteLength);
  const view = new DataView(bytes);
  const ascii = (offset, text) => [...text].forEach((c, i) => view.setUint8(offset + i,
                                                                           c.charCodeAt(0)));
  ascii(0, "RIFF");
  view.setUint32(4, HEADER_BYTES - 8 + pcm.byteLength, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true);  // the fmt chunk's size
  view.setUint16(20, 1, true);  // PCM
  view.setUint16(22, 1, true);  // one channel
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true);  // bytes a second
  view.setUint16(32, 2, true);  // bytes a frame
  view.setUint16(34, 16, true);  // bits a sample
  ascii(36, "data");
  view.setUint32(40, pcm.byteLength, true);
  pcm.forEach((value, i) => view.setInt16(HEADER_BYTES + 2 * i, value, true));
  return bytes;
}

/** The WAV file as a Blob (audio/wav), for a download link or an <audio> element. */
export function toWav(samples, sampleRate) {
  return new Blob([wavBytes(samples, sampleRate)], { type: "audio/wav" });
}
