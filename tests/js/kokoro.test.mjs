// Cutting text into pieces as the Python runtime does (kokoro_tvm/web/kokoro.js against
// kokoro_tvm/runtime/g2p.py's split_text and pieces).
import assert from "node:assert/strict";
import test from "node:test";

import { Lexicon, readWords } from "../../kokoro_tvm/web/g2p.js";
import { KokoroTTS, RawAudio, faded, sentences, splitText, wordFrames }
  from "../../kokoro_tvm/web/kokoro.js";

const words = (text) => text.split(/\s+/).filter(Boolean).length;

test("sentences end at . ! ? … followed by a space", () => {
  assert.deepEqual(sentences(" One. Two!  Three? Four… five "), ["One.", "Two!", "Three?",
                                                                 "Four…", "five"]);
});

test("a stretch over the limit is cut at sentences, then clauses, then spaces", () => {
  // As g2p.split_text cuts them (a sentence's clauses, then its words).
  assert.deepEqual(splitText("A b. C d e.", words, 2), ["A b.", "C", "d", "e."]);
  assert.deepEqual(splitText("a b, c d; e", words, 2), ["a b,", "c d;", "e"]);
  assert.deepEqual(splitText("a b c", words, 5), ["a b c"]);
  assert.deepEqual(splitText("   ", words, 5), []);
});

function tts(limit) {
  // A model of one bucket of limit + 2 tokens, a vocabulary of letters, spaces and marks, and
  // a lexicon that reads each of its words as itself.
  const model = { manifest: { max_tokens: 510 }, component: () => ({ buckets: [limit + 2] }) };
  const vocab = Object.fromEntries([..." abcdefghijklmnopqrstuvwxyz.,"].map((c, i) => [c, i]));
  const golds = Object.fromEntries(["aa", "bb", "cc", "dd"].map((w) => [w, w]));
  const lexicon = new Lexicon({ golds, silvers: {} });
  return Object.assign(new KokoroTTS(model, null, vocab),
                       { read: (text) => readWords(lexicon, text) });
}

test("whole sentences are joined up to the token limit; per sentence, each alone", () => {
  const speaker = tts(12);
  assert.equal(speaker.limit, 12);
  assert.deepEqual(speaker.tokenIds("ab?c"), [1, 2, 3]);
  // "aa bb." and "cc." are 6 and 3 tokens: joined (6 + 1 + 3 <= 12); "dd dd dd." (9) is not.
  assert.deepEqual(speaker.pieces("aa bb. cc. dd dd dd.", speaker.read).map((p) => p.phonemes),
                   ["aa bb. cc.", "dd dd dd."]);
  assert.deepEqual(speaker.pieces("aa bb. cc.", speaker.read, { perSentence: true }).map((p) => p.text),
                   ["aa bb.", "cc."]);
  // A joined piece's words are its sentences', a space after the first one's last.
  assert.deepEqual(speaker.pieces("aa bb. cc.", speaker.read)[0].words, [
    { text: "aa", phonemes: "aa", whitespace: " " },
    { text: "bb.", phonemes: "bb.", whitespace: " " },
    { text: "cc.", phonemes: "cc.", whitespace: "" }]);
  // A sentence over the limit is cut at its clauses.
  assert.deepEqual(speaker.pieces("aa bb cc, dd dd dd.", speaker.read).map((p) => p.text),
                   ["aa bb cc,", "dd dd dd."]);
});

test("RawAudio's WAV is 16-bit PCM at its rate", () => {
  const wav = new DataView(new RawAudio(new Float32Array([0, 1, -1]), 24000).toWav());
  assert.equal(wav.getUint32(24, true), 24000);
  assert.equal(wav.getUint32(40, true), 6);
  assert.equal(wav.getInt16(46, true), 32767);
});

test("words are timed from the frames of their tokens, 3 frames early", () => {
  // Pads of 4 and 2 frames; "ab" (2 tokens) and a space, then "c" (1 token): "ab" ends in the
  // middle of the space, "c" at its own end, both 3 frames early.
  const count = (s) => s.length;
  const words = [{ phonemes: "ab", whitespace: " " }, { phonemes: "c", whitespace: "" }];
  assert.deepEqual(wordFrames(words, [4, 1, 2, 2, 5, 2], count),
                   [{ start: 1, end: 5 }, { start: 5, end: 11 }]);
  assert.throws(() => wordFrames(words, [4, 1, 2], count), /3 frame counts/);
});

test("a piece's edges are faded in and out, its middle kept", () => {
  const out = faded(new Float32Array(1000).fill(1), 24000);  // 120 samples of ramp a side
  assert.equal(out[0], 0);
  assert.equal(out[999], 0);
  assert.ok(out[60] > 0.4 && out[60] < 0.6);
  assert.equal(out[500], 1);
});
