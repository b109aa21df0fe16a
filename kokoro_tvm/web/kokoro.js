// Kokoro in the browser with kokoro-js's API (KokoroTTS.from_pretrained, generate, stream,
// list_voices, audio with toWav), over a web folder (./loader.js) on WebGPU (./player.js):
// English text to phonemes (./g2p.js), cut into pieces as the Python runtime cuts it
// (kokoro_tvm/runtime/g2p.py: whole sentences joined up to the token limit, a sentence too long
// cut at clauses, then spaces), each piece through Kokoro's chain (./engine.js), its edges
// faded and its words timed as the Python runtime times them (kokoro_tvm/runtime/speech.py).

import { Engine, styleFor } from "./engine.js";
import { ESPEAK } from "./espeak.js";
import { phonemesOf, readWords, wordsOf } from "./g2p.js";
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

// Raised-cosine ramps at each piece's edges, so that pieces join without clicks
// (speech.FADE_SECONDS).
export const FADE_SECONDS = 0.005;
// KPipeline times a piece's words from this many frames before their phonemes, and no earlier
// than the piece's start (speech.KPIPELINE_LEAD_FRAMES).
export const WORD_LEAD_FRAMES = 3;

/** `samples` with FADE_SECONDS raised-cosine ramps in and out (speech._faded). */
export function faded(samples, sampleRate) {
  const ramp = Math.min(Math.trunc(FADE_SECONDS * sampleRate), Math.floor(samples.length / 2));
  const out = Float32Array.from(samples);
  for (let i = 0; i < ramp; i++) {
    // numpy's linspace(0, pi, ramp) in float32, as the Python runtime computes its window.
    const gain = Math.fround(0.5 - 0.5 * Math.cos(ramp === 1 ? 0 : (Math.PI * i) / (ramp - 1)));
    out[i] = Math.fround(out[i] * gain);
    out[samples.length - 1 - i] = Math.fround(out[samples.length - 1 - i] * gain);
  }
  return out;
}

/** Per word of a piece: its start and end in frames from the piece's start, as KPipeline's
 * join_timestamps gives them for `frames` (per token, the pads included; speech.word_frames):
 * each word ends in the middle of the whitespace after it and the next starts there, all
 * WORD_LEAD_FRAMES early (the first word from the piece's start at the earliest). `count`
 * is the number of Kokoro tokens of a string. */
export function wordFrames(words, frames, count) {
  const ends = [];
  frames.reduce((at, n) => { ends.push(at + n); return at + n; }, 0);
  const lead = Math.min(frames[0], WORD_LEAD_FRAMES);
  let token = 1;
  let start = frames[0] - lead;
  const timed = words.map((word) => {
    const spoken = token + count(word.phonemes);
    const spaced = spoken + count(word.whitespace);
    const end = (ends[spoken - 1] + ends[spaced - 1]) / 2 - lead;
    const times = { start, end };
    [token, start] = [spaced, end];
    return times;
  });
  if (token !== frames.length - 1) {
    throw new Error(`${frames.length} frame counts for words of ${token - 1} tokens and pads`);
  }
  return timed;
}

/** Audio as kokoro-js returns it: samples and their rate, with WAV helpers; and the words it
 * speaks, [{text, start, end}] in seconds (the Python API's timestamps). */
export class RawAudio {
  constructor(audio, samplingRate, words = []) {
    this.audio = audio;
    this.sampling_rate = samplingRate;
    this.words = words;
  }

  /** The WAV file's bytes (16-bit PCM, as the Python runtime writes it). */
  toWav() { return wavBytes(this.audio, this.sampling_rate); }

  toBlob() { return new Blob([this.toWav()], { type: "audio/wav" }); }
}

export class KokoroTTS {
  constructor(model, device, vocab) {
    Object.assign(this, { model, device, vocab, engine: new Engine(model, device),
                          readers: new Map() });
  }

  /** The model folder at `url` (results/web/model) on this page's WebGPU; the default voice's
   * G2P loaded with it. */
  static async from_pretrained(url, { device = null } = {}) {
    const model = await loadModel(url);
    const [gpu, config] = await Promise.all([device ?? WebGpuDevice.request(), model.config()]);
    const tts = new KokoroTTS(model, gpu, config.vocab);
    await tts.reader(model.manifest.default_voice);
    return tts;
  }

  /** The G2P of `voice`'s language (the first letter of its name, as the Python runtime reads
   * it): text -> its words with their phonemes. misaki's lexicons for English (./g2p.js),
   * eSpeak NG for the languages the Python runtime reads with it (./espeak.js); a language no
   * browser G2P reads as the Python runtime does is refused in one line. */
  async reader(voice) {
    const language = this.model.language(voice);
    if (!this.readers.has(language.code)) {
      this.readers.set(language.code, language.g2p === ESPEAK
        ? this.model.espeak().then((espeak) =>
          (text) => wordsOf(text, espeak.phonemize(text, language.code)))
        : this.model.lexicon(language.g2p).then((lexicon) => (text) => readWords(lexicon, text)));
    }
    return this.readers.get(language.code);
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

  /** The text's pieces: [{text, phonemes, words}], whole sentences joined up to the limit;
   * `words` as `reader` (a G2P: text -> words, see `reader`) gives them. */
  pieces(text, reader, { perSentence = false } = {}) {
    const read = new Map();
    const wordsIn = (stretch) => {
      if (!read.has(stretch)) read.set(stretch, reader(stretch));
      return read.get(stretch);
    };
    const size = (stretch) => this.tokenIds(phonemesOf(wordsIn(stretch))).length;
    const out = [];
    let held = null;
    for (const sentence of sentences(text)) {
      const stretches = splitText(sentence, size, this.limit, 1);
      const whole = stretches.length === 1 && !perSentence;
      for (const stretch of stretches) {
        if (size(stretch) === 0) continue;  // nothing Kokoro can say (punctuation alone)
        const piece = { text: stretch, words: wordsIn(stretch) };
        if (whole && held && size(held.text) + 1 + size(stretch) <= this.limit) {
          const last = held.words.at(-1);  // a space between the joined sentences' phonemes
          held = { text: `${held.text} ${stretch}`,
                   words: [...held.words.slice(0, -1),
                           { ...last, whitespace: `${last.whitespace} ` }, ...piece.words] };
          read.set(held.text, held.words);
          continue;
        }
        if (held) out.push(held);
        held = null;
        if (whole) held = piece;
        else out.push(piece);
      }
    }
    if (held) out.push(held);
    return out.map((piece) => ({ ...piece, phonemes: phonemesOf(piece.words) }));
  }

  /** One piece's audio, edges faded, and its words timed from its start in seconds. */
  async speakPiece(piece, voice, speed, seed) {
    const ids = this.tokenIds(piece.phonemes);
    const style = styleFor(await this.model.voice(voice), ids.length);
    const { samples, frames } = await this.engine.synthesize(ids, style, speed, seed);
    const second = this.model.manifest.samples_per_frame / this.model.sampleRate;
    const times = wordFrames(piece.words, frames, (s) => this.tokenIds(s).length);
    const words = piece.words.map((word, i) => ({
      text: word.text, start: times[i].start * second, end: times[i].end * second }));
    return { samples: faded(samples, this.model.sampleRate), words };
  }

  /** `text` spoken whole in `voice`: a RawAudio at the model's sample rate, with its words. */
  async generate(text, { voice = this.model.manifest.default_voice, speed = 1, seed = 0 } = {}) {
    const chunks = [];
    for await (const chunk of this.stream(text, { voice, speed, seed, perSentence: false })) {
      chunks.push(chunk.audio);
    }
    const audio = new Float32Array(chunks.reduce((n, c) => n + c.audio.length, 0));
    chunks.reduce((at, c) => { audio.set(c.audio, at); return at + c.audio.length; }, 0);
    return new RawAudio(audio, this.model.sampleRate, chunks.flatMap((c) => c.words));
  }

  /** `text` spoken a sentence at a time: yields {text, phonemes, start, audio} as each is
   * decoded, `start` and the audio's words in seconds of the whole; the i-th piece's noise from
   * `seed` + i, as the Python runtime draws it. */
  async* stream(text, { voice = this.model.manifest.default_voice, speed = 1, seed = 0,
                        perSentence = true } = {}) {
    let done = 0;
    const reader = await this.reader(voice);
    for (const [i, piece] of this.pieces(text, reader, { perSentence }).entries()) {
      const { samples, words } = await this.speakPiece(piece, voice, speed, seed + i);
      const start = done / this.model.sampleRate;
      const timed = words.map((w) => ({ ...w, start: start + w.start, end: start + w.end }));
      yield { text: piece.text, phonemes: piece.phonemes, start,
              audio: new RawAudio(samples, this.model.sampleRate, timed) };
      done += samples.length;
    }
  }
}
