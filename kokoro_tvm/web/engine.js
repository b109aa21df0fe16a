// Kokoro's forward pass in the browser, from a model folder's plans (./loader.js): the Python
// engine's chain (kokoro_tvm/runtime/engine.py, TvmEngine) for one chunk of tokens. Per
// component the smallest bucket that fits, inputs zero-padded and masked: bert -> duration ->
// (host: frames per token) -> text_encoder -> f0n -> decoder (source, then body), the token
// side's features left on the device and gathered into frames by the libraries' `align`, and
// SineGen's noise drawn by the decoder library's `noise` (Philox, from the seed), as
// `TvmEngine(noise=LIBRARY_NOISE)` draws it.

import { ModelError } from "./loader.js";
import { roundHalfEven } from "./wav.js";

// The library functions and inputs the chain calls (kokoro_tvm/abi.py).
const ALIGN = "align";
const NOISE = "noise";
const MAX_SEED = 2 ** 53 - 1;  // a seed's two 32-bit words, exact in a JavaScript number

/** The smallest of `buckets` that holds `size`, or a ModelError naming the largest. */
export function fit(component, buckets, size) {
  const fitting = buckets.filter((bucket) => bucket >= size);
  if (!fitting.length) {
    throw new ModelError(`${component} needs a bucket of at least ${size} (the model's largest: ` +
                         `${Math.max(...buckets)}): speak a shorter text per call`);
  }
  return Math.min(...fitting);
}

/** Frames per token (at least one each) from the duration model's output at `speed`, rounded
 * halves to even as the Python engine's numpy does. */
export function framesOf(durations, speed) {
  const step = Math.fround(speed);  // float32 arithmetic, as numpy's on float32 durations
  return Array.from(durations, (d) => Math.max(roundHalfEven(Math.fround(d / step)), 1));
}

/** The token of each frame: token i repeated frames[i] times. */
export function frameTokens(frames) {
  const out = new Int32Array(frames.reduce((a, b) => a + b, 0));
  let at = 0;
  frames.forEach((n, token) => { out.fill(token, at, at + n); at += n; });
  return out;
}

/** The noise function's key for `seed`: its low and high 32-bit words. */
export function noiseKey(seed) {
  if (!Number.isInteger(seed) || seed < 0 || seed > MAX_SEED) {
    throw new RangeError(`a noise seed is a whole number from 0 to ${MAX_SEED}, not ${seed}`);
  }
  return new Uint32Array([seed % 2 ** 32, Math.floor(seed / 2 ** 32)]);
}

/** A voice's style for an utterance of `tokens` tokens (pads excluded): one row of its table,
 * as the Python runtime's style_for picks it. */
export function styleFor(voice, tokens) {
  const rows = voice.shape[0];
  const width = voice.data.length / rows;
  const row = Math.min(Math.max(tokens, 1), rows) - 1;
  return voice.data.subarray(row * width, (row + 1) * width);
}

const mask = (bucket, valid) => Uint8Array.from({ length: bucket }, (_, i) => (i >= valid ? 1 : 0));

/** Kokoro on one WebGPU device from one model folder. */
export class Engine {
  constructor(model, device) {
    this.model = model;
    this.device = device;
    this.libraries = new Map();
  }

  buckets(component) { return this.model.component(component).buckets; }

  async library(component, bucket) {
    const key = `${component}/${bucket}`;
    if (!this.libraries.has(key)) {
      this.libraries.set(key, this.model.open(this.device, component, bucket));
    }
    return this.libraries.get(key);
  }

  /** The aligned input `name` of `component` at `bucket`, from the token-side output `source`
   * and the token of each valid frame (padding frames take token -1: zeros). */
  async aligned(component, bucket, name, source, frameToken) {
    const tokens = new Int32Array(bucket).fill(-1);
    tokens.set(frameToken);
    const library = await this.library(component, bucket);
    const [aligned] = await library.onDevice(ALIGN, { [name]: source, frame_token: tokens });
    return aligned;
  }

  /** Audio (Float32Array at the model's sample rate) of token ids `ids` (no pads), in the style
   * `style` (2 * style_dim floats: decoder half first), at `speed`, SineGen's noise from `seed`;
   * with the frames each token (pads included) was given. */
  async synthesize(ids, style, speed = 1, seed = 0) {
    const styleDim = this.model.manifest.style_dim;
    const tokens = Int32Array.from([0, ...ids, 0]);
    const n = tokens.length;
    const textInputs = (bucket) => {
      const padding = mask(bucket, n);
      const ids = new Int32Array(bucket);
      ids.set(tokens);
      return { input_ids: { data: ids, shape: [1, bucket] },
               text_mask: { data: padding, shape: [1, bucket] },
               attention_mask: { data: padding.map((m) => 1 - m), shape: [1, bucket] } };
    };
    const decoderStyle = { data: style.slice(0, styleDim), shape: [1, styleDim] };
    const prosodyStyle = { data: style.slice(styleDim, 2 * styleDim), shape: [1, styleDim] };

    const bertBucket = fit("bert", this.buckets("bert"), n);
    const bert = await this.library("bert", bertBucket);
    let [dEn] = await bert.onDevice("main", textInputs(bertBucket));
    const durationBucket = fit("duration", this.buckets("duration"), n);
    if (durationBucket !== bertBucket) {  // another bucket: through the host, cut to n tokens
      const host = await dEn.read();
      const [, channels, length] = host.shape;
      const cut = new Float32Array(channels * durationBucket);
      for (let c = 0; c < channels; c++) {
        cut.set(host.data.subarray(c * length, c * length + Math.min(n, length)),
                c * durationBucket);
      }
      dEn = { data: cut, shape: [1, channels, durationBucket] };
    }
    const duration = await this.library("duration", durationBucket);
    const [d, durations] = await duration.onDevice("main", {
      ...textInputs(durationBucket), d_en: dEn, s: prosodyStyle });
    const textBucket = fit("text_encoder", this.buckets("text_encoder"), n);
    const textEncoder = await this.library("text_encoder", textBucket);
    const [tEn] = await textEncoder.onDevice("main", textInputs(textBucket));
    const frames = framesOf((await durations.read()).data.subarray(0, n), speed);
    const frameToken = frameTokens(frames);
    const total = frameToken.length;

    const f0nBucket = fit("f0n", this.buckets("f0n"), total);
    const bucket = fit("decoder", this.buckets("decoder"), total);
    if (bucket !== f0nBucket) {  // before f0n runs: its outputs stay on the device for the decoder
      throw new ModelError(`the f0n and decoder buckets differ (${f0nBucket}, ${bucket}): ` +
                           "rebuild the folder with the same frame buckets for both");
    }
    const f0n = await this.library("f0n", f0nBucket);
    const [f0, noiseN] = await f0n.onDevice("main", {
      en: await this.aligned("f0n", f0nBucket, "d", d, frameToken), s: prosodyStyle,
      frame_mask: { data: mask(f0nBucket, total), shape: [1, f0nBucket] } });

    const decoder = await this.library("decoder", bucket);
    const [phaseNoise, sineNoise] = await decoder.onDevice(NOISE, { key: noiseKey(seed) });
    const common = { f0, frame_mask: { data: mask(bucket, total), shape: [1, bucket] } };
    const [har] = await decoder.onDevice("source", {
      ...common, phase_noise: phaseNoise, sine_noise: sineNoise });
    const [audio] = await decoder.run("body", {
      ...common, asr: await this.aligned("decoder", bucket, "t_en", tEn, frameToken),
      n: noiseN, s: decoderStyle, har });
    const samples = audio.data.slice(0, this.model.manifest.samples_per_frame * total);
    return { samples, frames };
  }
}
