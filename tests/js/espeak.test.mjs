// The browser's eSpeak NG G2P (kokoro_tvm/web/espeak.js) without eSpeak NG: its phonemes written
// as phonemizer writes them and turned into Kokoro's as misaki's EspeakG2P does, punctuation
// kept out of eSpeak NG; and g2p.js's wordsOf, which maps such a G2P's phonemes to the words.
// tests/test_web.py runs the whole of it on eSpeak NG against the Python runtime.
import assert from "node:assert/strict";
import test from "node:test";

import { fromEspeak, marked, tied, toKokoro } from "../../kokoro_tvm/web/espeak.js";
import { wordsOf } from "../../kokoro_tvm/web/g2p.js";

test("a phoneme is tied before each letter but its first, stress and modifiers untied", () => {
  assert.equal(tied("tʃ"), "t^ʃ");
  assert.equal(tied("ˈoɪ"), "ˈo^ɪ");
  assert.equal(tied("aː"), "aː");     // ː is a modifier letter
  assert.equal(tied("cʰ"), "cʰ");
  assert.equal(tied("ˌɑ̃"), "ˌɑ̃");   // a combining tilde
});

test("eSpeak NG's phonemes become phonemizer's: tied, flags and pauses gone", () => {
  assert.equal(fromEspeak("m_ˈu_tʃ_o k_a_l_ˈo_ɾ | b_e"), "mˈut^ʃo kalˈoɾ be");
  assert.equal(fromEspeak("(en)_b_ɔː_n_(hi) h_ɛː"), "bɔːn hɛː");
});

test("misaki's EspeakG2P maps tied pairs to Kokoro's letters and drops ties and hyphens", () => {
  assert.equal(toKokoro("mˈut^ʃo ˈa^ɪ d^ʒ-e «x»"), "mˈuʧo ˈI ʤe (x)");
});

test("punctuation is cut out with its spaces, as phonemizer preserves it", () => {
  assert.deepEqual(marked("¿Hola, qué tal?"), [
    { mark: "¿" }, { text: "Hola" }, { mark: ", " }, { text: "qué tal" }, { mark: "?" }]);
});

test("phoneme words map to the text's words, clause by clause, or whole", () => {
  assert.deepEqual(wordsOf("Hola qué tal.", "ˈola kˈe tˈal."), [
    { text: "Hola", phonemes: "ˈola", whitespace: " " },
    { text: "qué", phonemes: "kˈe", whitespace: " " },
    { text: "tal.", phonemes: "tˈal.", whitespace: "" }]);
  // Two clauses; the second's words and phonemes differ in count: one word.
  assert.deepEqual(wordsOf("Sí, del todo.", "sˈi, deltˈodo."), [
    { text: "Sí,", phonemes: "sˈi,", whitespace: " " },
    { text: "del todo.", phonemes: "deltˈodo.", whitespace: "" }]);
  assert.deepEqual(wordsOf("a b", "x"), [{ text: "a b", phonemes: "x", whitespace: "" }]);
});
