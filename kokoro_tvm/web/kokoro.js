// Kokoro in the browser with kokoro-js's API (KokoroTTS.from_pretrained, generate, stream,
// list_voices, audio with toWav), over a web folder (./loader.js) on WebGPU (./player.js):
// English text to phonemes (./g2p.js), cut into pieces as the Python runtime cuts it
// (kokoro_tvm/runtime/g2p.py: whole sentences joined up to the token limit, a sentence too long
// cut at clauses, then spaces), each piece through Kokoro's chain (./engine.js).

import { Engine, styleFor } from "./engine.js";
import { phonemize } from "./g2p.js";
import { loadModel } from "./loader.js";
import { WebGpuDevice } from "./player.js";
import { wavBytes } from "./wav.js";

// Where text may be cut, best first: after a sentence end, a clause mark, any space (g2p.py's
// _BREAKS, English marks).
const BREAKS = [/(?<=[.!?…])\s+/, /(?<=[,;:—])\s+/, /\s+/];

const parts = (text, level) => text.trim().split(BREAKS[level]).filter((p) => p.trim());

/** The text's sentences. */
export function sentences(text) { return parts(text, 0); }

/** `text` cut into stretches of at most `limit` by `size`: at sentence ends, and only where a
 * sentence is still too long at clauses, then spaces, then anywhere (g2p.split_text). */
export function splitText(text, size, limit, level = 0) {
  text = text.trim();
  if (!text || size(text) <= limit) return text ? [text] : [];
  if (level === BREAKS.length) {
    const middle = Math.floor(text.length / 2);
    return [...splitText(text.slice(0, middle), size, limit, level),
            ...splitText(text.slice(middle), size, limit, level)];
  }
  const found = parts(text, level);
  if (found.length < 2) return splitText(text, size, limit, level + 1);
  return found.flatMap((part) => splitText(part, size, limit, level + 1));
}

/** Audio as kokoro-js returns it: samples and their rate, with WAV helpers. */
export class RawAudio {
  constructor(audio, samplingRate) {
    this.audio = audio;
    this.sampling_rate = samplingRate;
  }

  /** The WAV file's bytes (16-bit PCM, as the Python runtime writes it). */
  toWav() { return wavBytes(this.audio, this.sampling_rate); }

  toBlob() { return new Blob([this.toWav()], { type: "audio/wav" }); }
}

export class KokoroTTS {
  constructor(model, device, vocab, lexicon) {
    Object.assign(this, { model, device, vocab, lexicon, engine: new Engine(model, device) });
  }

  /** The model folder at `url` (results/web/model) on this page's WebGPU. */
  static async from_pretrained(url, { device = null } = {}) {
    const model = await loadModel(url);
    const [gpu, config, lexicon] = await Promise.all([
      device ?? WebGpuDevice.request(), model.config(), model.lexicon("en-us")]);
    return new KokoroTTS(model, gpu, config.vocab, lexicon);
  }

  /** One line: the WebGPU adapter the model runs on. */
  get adapter() { return this.device.describe(); }

  list_voices() { return this.model.voices; }

  /** Kokoro's token ids of `phonemes` (characters it does not know dropped, as KModel does). */
  tokenIds(phonemes) {
    return [...phonemes].filter((p) => p in this.vocab).map((p) => this.vocab[p]);
  }

  /** The most tokens a piece may have: the model's limit, within its largest text bucket
   * (two of a bucket's tokens are the pads). */
  get limit() {
    const buckets = ["bert", "duration", "text_encoder"]
      .map((c) => Math.max(...this.model.component(c).buckets));
    return Math.min(this.model.manifest.max_tokens, Math.min(...buckets) - 2);
  }

  /** The text's pieces: [{text, phonemes}], whole sentences joined up to the limit. */
  pieces(text, { perSentence = false } = {}) {
    const read = new Map();
    const phonemesOf = (stretch) => {
      if (!read.has(stretch)) read.set(stretch, phonemize(this.lexicon, stretch));
      return read.get(stretch);
    };
    const size = (stretch) => this.tokenIds(phonemesOf(stretch)).length;
    const out = [];
    let held = null;
    for (const sentence of sentences(text)) {
      const stretches = splitText(sentence, size, this.limit, 1);
      const whole = stretches.length === 1 && !perSentence;
      for (const stretch of stretches) {
        if (size(stretch) === 0) continue;  // nothing Kokoro can say (punctuation alone)
        const piece = { text: stretch, phonemes: phonemesOf(stretch) };
        if (whole && held && size(held.text) + 1 + size(stretch) <= this.limit) {
          held = { text: `${held.text} ${stretch}`, phonemes: `${held.phonemes} ${piece.phonemes}` };
          read.set(held.text, held.phonemes);
          continue;
        }
        if (held) out.push(held);
        held = null;
        if (whole) held = piece;
        else out.push(piece);
      }
    }
    if (held) out.push(held);
    return out;
  }

  async speakPiece(piece, voice, speed, seed) {
    const ids = this.tokenIds(piece.phonemes);
    const style = styleFor(await this.model.voice(voice), ids.length);
    const { samples } = await this.engine.synthesize(ids, style, speed, seed);
    return samples;
  }

  /** `text` spoken whole in `voice`: a RawAudio at the model's sample rate. */
  async generate(text, { voice = this.model.manifest.default_voice, speed = 1, seed = 0 } = {}) {
    const chunks = [];
    for await (const chunk of this.stream(text, { voice, speed, seed, perSentence: false })) {
      chunks.push(chunk.audio.audio);
    }
    const audio = new Float32Array(chunks.reduce((n, c) => n + c.length, 0));
    chunks.reduce((at, c) => { audio.set(c, at); return at + c.length; }, 0);
    return new RawAudio(audio, this.model.sampleRate);
  }

  /** `text` spoken a sentence at a time: yields {text, phonemes, audio} as each is decoded. */
  async* stream(text, { voice = this.model.manifest.default_voice, speed = 1, seed = 0,
                        perSentence = true } = {}) {
    for (const piece of this.pieces(text, { perSentence })) {
      const samples = await this.speakPiece(piece, voice, speed, seed);
      yield { text: piece.text, phonemes: piece.phonemes,
              audio: new RawAudio(samples, this.model.sampleRate) };
    }
  }
}
