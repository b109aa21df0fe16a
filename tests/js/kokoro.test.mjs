// Cutting text into pieces as the Python runtime does (kokoro_tvm/web/kokoro.js against
// kokoro_tvm/runtime/g2p.py's split_text and pieces).
import assert from "node:assert/strict";
import test from "node:test";

import { Lexicon } from "../../kokoro_tvm/web/g2p.js";
import { KokoroTTS, RawAudio, sentences, splitText } from "../../kokoro_tvm/web/kokoro.js";

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
  return new KokoroTTS(model, null, vocab, new Lexicon({ golds, silvers: {} }));
}

test("whole sentences are joined up to the token limit; per sentence, each alone", () => {
  const speaker = tts(12);
  assert.equal(speaker.limit, 12);
  assert.deepEqual(speaker.tokenIds("ab?c"), [1, 2, 3]);
  // "aa bb." and "cc." are 6 and 3 tokens: joined (6 + 1 + 3 <= 12); "dd dd dd." (9) is not.
  assert.deepEqual(speaker.pieces("aa bb. cc. dd dd dd.").map((p) => p.phonemes),
                   ["aa bb. cc.", "dd dd dd."]);
  assert.deepEqual(speaker.pieces("aa bb. cc.", { perSentence: true }).map((p) => p.text),
                   ["aa bb.", "cc."]);
  // A sentence over the limit is cut at its clauses.
  assert.deepEqual(speaker.pieces("aa bb cc, dd dd dd.").map((p) => p.text),
                   ["aa bb cc,", "dd dd dd."]);
});

test("RawAudio's WAV is 16-bit PCM at its rate", () => {
  const wav = new DataView(new RawAudio(new Float32Array([0, 1, -1]), 24000).toWav());
  assert.equal(wav.getUint32(24, true), 24000);
  assert.equal(wav.getUint32(40, true), 6);
  assert.equal(wav.getInt16(46, true), 32767);
});
