// Kokoro's phonemes for the languages the Python runtime reads with eSpeak NG (Spanish, French,
// Hindi, Italian, Brazilian Portuguese: misaki's EspeakG2P over phonemizer's espeak backend),
// from eSpeak NG compiled to WebAssembly (npm's @echogarden/espeak-ng-emscripten, which
// `snakemake web` copies beside the module). No browser G2P reads Japanese or Mandarin as the
// Python runtime does (pyopenjtalk, jieba and pypinyin), so those voices are refused.

// The manifest's g2p key of eSpeak NG's data, and a language's G2P there (stages/web.py's ESPEAK).
export const ESPEAK = "espeak";
// phonemizer's punctuation marks, which it keeps out of eSpeak NG and puts back.
const MARKS = ';:,.!?¡¿—…"«»“”(){}[]';
const MARKED = new RegExp(`(\\s*[${MARKS.replace(/[\]\[\\^-]/g, "\\$&")}]+\\s*)+`, "gu");
const STRESS = /^[ˈˌ]+/u;
// misaki's E2M for EspeakG2P (misaki/espeak.py): tied pairs to Kokoro's one-letter phonemes.
const E2M = [["a^ɪ", "I"], ["a^ʊ", "W"], ["d^z", "ʣ"], ["d^ʒ", "ʤ"], ["e^ɪ", "A"], ["o^ʊ", "O"],
             ["s^s", "S"], ["t^s", "ʦ"], ["t^ʃ", "ʧ"], ["ɔ^ɪ", "Y"], ["ə^ʊ", "Q"]];

/** A phoneme as phonemizer's espeak backend writes it with tie="^": eSpeak NG's tie before
 * each letter of a phoneme but its first, modifier letters and diacritics excepted (its
 * WriteMnemonic), and the stress marks before it as they are. */
export function tied(phoneme) {
  const stress = phoneme.match(STRESS)?.[0] ?? "";
  const letters = [...phoneme.slice(stress.length)];
  return stress + letters.map((c, i) => {
    const code = c.codePointAt(0);
    const tie = i > 0 && /\p{L}/u.test(c) && (code < 0x2b0 || code > 0x36f);
    return (tie ? "^" : "") + c;
  }).join("");
}

/** eSpeak NG's phonemes (its IPA, "_" between phonemes, " " between words) as phonemizer
 * gives them: tied, language switches' flags removed, pauses dropped. */
export function fromEspeak(ipa) {
  return ipa.replace(/\([a-z-]+\)/g, "").trim().split(/\s+/)
    .map((word) => word.split("_").filter((p) => p && p !== "|" && p !== "||").map(tied).join(""))
    .filter((word) => word).join(" ");
}

/** misaki's EspeakG2P on the phonemizer output ``ps`` (Kokoro-82M, its version 1.0). */
export function toKokoro(ps) {
  for (const [from, to] of E2M) ps = ps.replaceAll(from, to);
  return ps.replaceAll("^", "").replaceAll("-", "").replaceAll("«", "(").replaceAll("»", ")");
}

/** ``text`` cut as phonemizer preserves punctuation: the runs between marks, and the marks
 * with their spaces. */
export function marked(text) {
  const pieces = [];
  let at = 0;
  for (const match of text.matchAll(MARKED)) {
    if (match.index > at) pieces.push({ text: text.slice(at, match.index) });
    pieces.push({ mark: match[0] });
    at = match.index + match[0].length;
  }
  if (at < text.length) pieces.push({ text: text.slice(at) });
  return pieces;
}

/** eSpeak NG in WebAssembly (one instance: its voice switched per language). */
export class Espeak {
  constructor(module) {
    this.module = module;
    this.worker = new module.eSpeakNGWorker();
    this.language = null;
  }

  /** ``createModule`` is the Emscripten module's default export, ``data`` its espeak-ng.data
   * (the loader fetches and checks it). */
  static async load(createModule, data) {
    return new Espeak(await createModule({ getPreloadedPackage: () => data }));
  }

  /** eSpeak NG's IPA for a run of text without punctuation, in ``language``. */
  ipa(text, language) {
    if (language !== this.language) {
      this.worker.set_voice(language, language);  // its name and language
      this.language = language;
    }
    const pointer = this.module.getPointer(this.worker.text_to_phonemes(text, 1));
    const heap = this.module.HEAPU8;
    let end = pointer;
    while (heap[end]) end++;
    return new TextDecoder().decode(heap.subarray(pointer, end));
  }

  /** Kokoro's phonemes of ``text`` in ``language`` (eSpeak NG's code, as the Python runtime's
   * languages name it: es, fr-fr, hi, it, pt-br), as its EspeakG2P gives them. */
  phonemize(text, language) {
    // misaki's EspeakG2P: angle quotes to curly ones, parentheses to angles (and back).
    text = text.replaceAll("«", "\u201c").replaceAll("»", "\u201d")
      .replaceAll("(", "«").replaceAll(")", "»");
    const ps = marked(text)
      .map((piece) => piece.mark ?? fromEspeak(this.ipa(piece.text.trim(), language)))
      .join("").trim();
    return toKokoro(ps);
  }
}
