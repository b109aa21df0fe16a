// English text to Kokoro's phonemes in the browser, from misaki's lexicons (the web folder's
// g2p/{lang}.json, which `snakemake web` writes from the misaki the Python runtime uses): its
// word lookup (kokoro_tvm/runtime/g2p.py uses misaki's G2P), with what misaki learns from spaCy's
// tagger left out: no part of speech (a word with several readings takes its default; "a", "I"
// and "in" as their usual tags read them), punctuation split off words by a rule, not a
// tokenizer, and no numbers, currency or abbreviations (a word the lexicons cannot read is
// dropped, as the Python runtime drops one). docs/browser.md measures it against the Python
// runtime's phonemes.

const STRESSES = "ˌˈ";
const PRIMARY = "ˈ";
const SECONDARY = "ˌ";
const VOWELS = new Set("AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ");
const CONSONANTS = new Set("bdfhjklmnpstvwzðŋɡɹɾʃʒʤʧθ");
const US_TAUS = new Set("AIOWYiuæɑəɛɪɹʊʌ");
const PUNCTS = new Set(";:,.!?—…\"“”");
const NON_QUOTE_PUNCTS = new Set(";:,.!?—…");
const SYMBOLS = { "%": "percent", "&": "and", "+": "plus", "@": "at" };
const LEXICON_LETTERS = /^['\-A-Za-z]+$/;

const isAlpha = (word) => /^\p{L}+$/u.test(word);
const lower = (word) => word.toLowerCase();
const upper = (word) => word.toUpperCase();
const capitalize = (word) => word.charAt(0).toUpperCase() + word.slice(1).toLowerCase();

/** misaki's apply_stress: `ps` with its stress moved, added or dropped by `stress`. */
export function applyStress(ps, stress) {
  const restress = (text) => {
    const chars = [...text];
    const placed = chars.map((c, i) => [i, c]);
    chars.forEach((c, i) => {
      if (STRESSES.includes(c)) {
        const vowel = chars.findIndex((v, j) => j >= i && VOWELS.has(v));
        placed[i] = [vowel - 0.5, c];
      }
    });
    return placed.sort((a, b) => a[0] - b[0]).map(([, c]) => c).join("");
  };
  const hasVowel = [...ps ?? ""].some((c) => VOWELS.has(c));
  const hasStress = [...ps ?? ""].some((c) => STRESSES.includes(c));
  if (stress === null || stress === undefined || ps === null) return ps;
  if (stress < -1) return ps.replaceAll(PRIMARY, "").replaceAll(SECONDARY, "");
  if (stress === -1 || ([0, -0.5].includes(stress) && ps.includes(PRIMARY))) {
    return ps.replaceAll(SECONDARY, "").replaceAll(PRIMARY, SECONDARY);
  }
  if ([0, 0.5, 1].includes(stress) && !hasStress) {
    return hasVowel ? restress(SECONDARY + ps) : ps;
  }
  if (stress >= 1 && !ps.includes(PRIMARY) && ps.includes(SECONDARY)) {
    return ps.replaceAll(SECONDARY, PRIMARY);
  }
  if (stress > 1 && !hasStress) return hasVowel ? restress(PRIMARY + ps) : ps;
  return ps;
}

/** misaki's English lexicon lookup (its Lexicon class) over `golds` and `silvers`. */
export class Lexicon {
  constructor({ golds, silvers, british = false }) {
    this.golds = golds;
    this.silvers = silvers;
    this.british = british;  // misaki's British English: its suffixes' own vowels
    this.reduced = british ? "ɪ" : "ᵻ";
  }

  gold(word) { return Object.hasOwn(this.golds, word) ? this.golds[word] : undefined; }

  silver(word) { return Object.hasOwn(this.silvers, word) ? this.silvers[word] : undefined; }

  has(word) { return this.gold(word) !== undefined || this.silver(word) !== undefined; }

  nnp(word) {
    const ps = [...word].filter((c) => /\p{L}/u.test(c)).map((c) => this.gold(upper(c)));
    if (ps.some((p) => typeof p !== "string")) return null;
    const stressed = applyStress(ps.join(""), 0);
    const cut = stressed.lastIndexOf(SECONDARY);
    return cut < 0 ? stressed : stressed.slice(0, cut) + PRIMARY + stressed.slice(cut + 1);
  }

  special(word, ctx) {
    if (Object.hasOwn(SYMBOLS, word)) return this.lookup(SYMBOLS[word], null, ctx);
    if (word === "a" || word === "A") return "ɐ";  // as a determiner, its usual tag
    if (["am", "Am", "AM"].includes(word)) {
      return ctx.futureVowel === null || word !== "am" ? this.gold("am") : "ɐm";
    }
    if (["an", "An", "AN"].includes(word)) return "ɐn";
    if (word === "I") return `${SECONDARY}I`;
    if (word === "to" || word === "To") {
      return { null: this.gold("to"), false: "tə", true: "tʊ" }[String(ctx.futureVowel)];
    }
    if (word === "in" || word === "In") return (ctx.futureVowel === null ? PRIMARY : "") + "ɪn";
    if (word === "the" || word === "The") return ctx.futureVowel === true ? "ði" : "ðə";
    if (["used", "Used", "USED"].includes(word)) {
      return this.gold("used")[ctx.futureTo ? "VBD" : "DEFAULT"];
    }
    return null;
  }

  isKnown(word) {
    if (this.has(word) || Object.hasOwn(SYMBOLS, word)) return true;
    if (!isAlpha(word) || !LEXICON_LETTERS.test(word)) return false;
    if (word.length === 1) return true;
    if (word === upper(word) && this.gold(lower(word)) !== undefined) return true;
    return word.slice(1) === upper(word.slice(1));
  }

  lookup(word, stress, ctx) {
    // An all-capital word is read as a proper noun (letter by letter) only by its tag, which
    // this G2P lacks.
    if (word === upper(word) && this.gold(word) === undefined) word = lower(word);
    let ps = this.gold(word);
    if (ps === undefined) ps = this.silver(word);
    if (ps !== null && typeof ps === "object") {
      ps = ctx && ctx.futureVowel === null && "None" in ps ? ps.None : ps.DEFAULT;
    }
    if (ps === undefined || ps === null) return this.nnp(word);
    return applyStress(ps, stress);
  }

  withS(stem) {
    if (!stem) return null;
    if ("ptkfθ".includes(stem.at(-1))) return `${stem}s`;
    if ("szʃʒʧʤ".includes(stem.at(-1))) return `${stem}${this.reduced}z`;
    return `${stem}z`;
  }

  stemS(word, stress, ctx) {
    if (word.length < 3 || !word.endsWith("s")) return null;
    let stem;
    if (!word.endsWith("ss") && this.isKnown(word.slice(0, -1))) stem = word.slice(0, -1);
    else if ((word.endsWith("'s") || (word.length > 4 && word.endsWith("es") &&
              !word.endsWith("ies"))) && this.isKnown(word.slice(0, -2))) stem = word.slice(0, -2);
    else if (word.length > 4 && word.endsWith("ies") &&
             this.isKnown(`${word.slice(0, -3)}y`)) stem = `${word.slice(0, -3)}y`;
    else return null;
    return this.withS(this.lookup(stem, stress, ctx));
  }

  withEd(stem) {
    if (!stem) return null;
    const last = stem.at(-1);
    if ("pkfθʃsʧ".includes(last)) return `${stem}t`;
    if (last === "d") return `${stem}${this.reduced}d`;
    if (last !== "t") return `${stem}d`;
    if (this.british || stem.length < 2) return `${stem}ɪd`;
    if (US_TAUS.has(stem.at(-2))) return `${stem.slice(0, -1)}ɾᵻd`;
    return `${stem}ᵻd`;
  }

  stemEd(word, stress, ctx) {
    if (word.length < 4 || !word.endsWith("d")) return null;
    let stem;
    if (!word.endsWith("dd") && this.isKnown(word.slice(0, -1))) stem = word.slice(0, -1);
    else if (word.length > 4 && word.endsWith("ed") && !word.endsWith("eed") &&
             this.isKnown(word.slice(0, -2))) stem = word.slice(0, -2);
    else return null;
    return this.withEd(this.lookup(stem, stress, ctx));
  }

  withIng(stem) {
    if (!stem) return null;
    if (this.british) {
      if ("əː".includes(stem.at(-1))) return null;
    } else if (stem.length > 1 && stem.at(-1) === "t" && US_TAUS.has(stem.at(-2))) {
      return `${stem.slice(0, -1)}ɾɪŋ`;
    }
    return `${stem}ɪŋ`;
  }

  stemIng(word, stress, ctx) {
    if (word.length < 5 || !word.endsWith("ing")) return null;
    let stem;
    if (word.length > 5 && this.isKnown(word.slice(0, -3))) stem = word.slice(0, -3);
    else if (this.isKnown(`${word.slice(0, -3)}e`)) stem = `${word.slice(0, -3)}e`;
    else if (word.length > 5 && /([bcdgklmnprstvxz])\1ing$|cking$/.test(word) &&
             this.isKnown(word.slice(0, -4))) stem = word.slice(0, -4);
    else return null;
    return this.withIng(this.lookup(stem, stress, ctx));
  }

  /** A token's phonemes, or null (misaki's Lexicon call): a capitalized word stressed 0.5, an
   * all-capital one 2. */
  read(text, ctx) {
    const word = text.replaceAll("‘", "'").replaceAll("’", "'").normalize("NFKC");
    const stress = word === lower(word) ? null : word === upper(word) ? 2 : 0.5;
    return this.word(word, stress, ctx) ?? this.number(word);
  }

  /** A number's phonemes (misaki's get_number for a number standing alone: cardinals, years,
   * ordinals, decimals, a plural or verb suffix), or null. */
  number(word) {
    const found = word.match(NUMBER);
    if (!found) return null;
    const [, minus, digits, suffix] = found;
    if (suffix && !NUMBER_SUFFIXES.includes(suffix)) return null;
    const plain = digits.replaceAll(",", "");
    let text;
    if (/^\d+$/.test(plain) && ORDINALS.has(suffix)) text = ordinal(Number(plain));
    else if (!minus && /^\d{4}$/.test(digits)) text = year(Number(digits));
    else if (plain.includes(".")) {
      const [whole, fraction] = plain.split(".");
      text = `${whole ? cardinal(Number(whole)) : ""} point ${[...fraction]
        .map((d) => ONES[Number(d)]).join(" ")}`;
    } else text = cardinal(Number(plain));
    const words = [...(minus ? ["minus"] : []), ...text.split(/[^a-z]+/).filter(Boolean)];
    const ps = words.map((w) => this.lookup(w, w === "point" ? -2 : null, null));
    if (ps.some((p) => !p)) return null;
    const result = ps.join(" ");
    if (suffix === "s" || suffix === "'s") return this.withS(result);
    if (suffix === "ed" || suffix === "'d") return this.withEd(result);
    if (suffix === "ing") return this.withIng(result);
    return result;
  }

  /** A word's phonemes at `stress` (misaki's get_word without a tag), or null. */
  word(word, stress, ctx) {
    const special = this.special(word, ctx);
    if (special !== null) return special;
    const wl = lower(word);
    if (word.length > 1 && isAlpha(word.replaceAll("'", "")) && word !== wl && !this.has(word) &&
        (word === upper(word) || word.slice(1) === lower(word.slice(1))) &&
        (this.has(wl) || this.stemS(wl, stress, ctx) || this.stemEd(wl, stress, ctx) ||
         this.stemIng(wl, stress, ctx))) {
      word = wl;
    }
    if (this.isKnown(word)) return this.lookup(word, stress, ctx);
    if (word.endsWith("s'") && this.isKnown(`${word.slice(0, -2)}'s`)) {
      return this.lookup(`${word.slice(0, -2)}'s`, stress, ctx);
    }
    if (word.endsWith("'") && this.isKnown(word.slice(0, -1))) {
      return this.lookup(word.slice(0, -1), stress, ctx);
    }
    return this.stemS(word, stress, ctx) ?? this.stemEd(word, stress, ctx) ??
      this.stemIng(word, stress ?? 0.5, ctx);
  }
}

const ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
              "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
              "seventeen", "eighteen", "nineteen"];
const TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
              "ninety"];
const SCALES = [[1e12, "trillion"], [1e9, "billion"], [1e6, "million"], [1e3, "thousand"]];
const ORDINALS = new Set(["st", "nd", "rd", "th"]);
const IRREGULAR_ORDINALS = { one: "first", two: "second", three: "third", five: "fifth",
                             eight: "eighth", nine: "ninth", twelve: "twelfth" };

/** A whole number in words, as num2words writes it (the "and"s misaki drops left out). */
export function cardinal(n) {
  if (n < 20) return ONES[n];
  if (n < 100) return TENS[Math.floor(n / 10)] + (n % 10 ? `-${ONES[n % 10]}` : "");
  if (n < 1000) {
    return `${ONES[Math.floor(n / 100)]} hundred` + (n % 100 ? ` ${cardinal(n % 100)}` : "");
  }
  for (const [scale, name] of SCALES) {
    if (n >= scale) {
      const rest = n % scale;
      return `${cardinal(Math.floor(n / scale))} ${name}` + (rest ? ` ${cardinal(rest)}` : "");
    }
  }
  return String(n);
}

function ordinal(n) {
  const words = cardinal(n).split(/(?=[ -])/);
  const last = words.pop();
  const [, mark, word] = last.match(/^([ -]?)(.*)$/);
  const nth = IRREGULAR_ORDINALS[word] ?? (word.endsWith("y") ? `${word.slice(0, -1)}ieth`
                                                                : `${word}th`);
  return [...words, mark + nth].join("");
}

/** A year in words, as num2words' to_year: 1703 "seventeen oh-three", 1800 "eighteen hundred",
 * 2005 "two thousand five". */
function year(n) {
  const high = Math.floor(n / 100);
  const low = n % 100;
  if (high === 0 || (high % 10 === 0 && low < 10) || high >= 100) return cardinal(n);
  const lowText = low === 0 ? "hundred" : low < 10 ? `oh-${cardinal(low)}` : cardinal(low);
  return `${cardinal(high)} ${lowText}`;
}

const NUMBER = /^(-?)([\d,]*\.?\d+)([a-z']*)$/;
const NUMBER_SUFFIXES = ["ing", "'d", "ed", "'s", ...ORDINALS, "s"];

// A word with the punctuation before and after it split off (misaki keeps them as tokens); a
// number keeps its commas and point.
const TOKEN = /\d[\d,.]*\d[a-z']*|[\p{L}\p{N}'’\-]+|[^\s\p{L}\p{N}'’\-]/gu;

/** The text's tokens: {text, whitespace} in order, words and punctuation marks apart. */
export function tokens(text) {
  const found = [];
  for (const match of text.matchAll(TOKEN)) {
    const end = match.index + match[0].length;
    const whitespace = /^\s/.test(text.slice(end)) ? " " : "";
    found.push({ text: match[0].replaceAll("’", "'"), whitespace });
  }
  if (found.length) found[found.length - 1].whitespace = "";
  return found;
}

function context(ctx, ps, text) {
  let futureVowel = ctx.futureVowel;
  for (const c of ps ?? "") {
    if (VOWELS.has(c) || CONSONANTS.has(c) || NON_QUOTE_PUNCTS.has(c)) {
      futureVowel = NON_QUOTE_PUNCTS.has(c) ? null : VOWELS.has(c);
      break;
    }
  }
  return { futureVowel, futureTo: text === "to" || text === "To" };
}

/** English text -> [{text, phonemes, whitespace}] per token, as misaki's G2P gives them (a
 * word it cannot read has empty phonemes), read from the end as misaki reads them (a word's
 * reading depends on the next word's first sound). */
export function phonemizeWords(lexicon, text) {
  const words = tokens(text);
  let ctx = { futureVowel: null, futureTo: false };
  for (let i = words.length - 1; i >= 0; i--) {
    const word = words[i];
    let ps;
    if (word.text.length === 1 && PUNCTS.has(word.text)) ps = word.text;
    else if ([...word.text].every((c) => "',-._‘’/".includes(c))) ps = "";
    else if (word.text.includes("-") && !lexicon.has(word.text)) {
      ps = word.text.split("-").filter(Boolean).map((part) => lexicon.read(part, ctx) ?? "")
        .join("");  // misaki reads a hyphenated word's parts as one word
    } else ps = lexicon.read(word.text, ctx);
    word.phonemes = (ps ?? "").replaceAll("ɾ", "T").replaceAll("ʔ", "t");
    ctx = context(ctx, ps, word.text);
  }
  return words;
}

/** The phoneme string of `words` ({phonemes, whitespace}): what Kokoro is given. */
export const phonemesOf = (words) => words.map((w) => w.phonemes + w.whitespace).join("");

// Where a clause ends in a text and in its phonemes (runtime/g2p.py's).
const TEXT_CLAUSE_END = /(?<=[.!?…।,;:—])\s+|(?<=[、，；：。！？])\s*/u;
const PHONEME_CLAUSE_END = /[.!?…,;:—]$/u;

/** The phoneme words (space-separated) of a G2P that gives no words of its own, mapped to
 * `text`'s words (runtime/g2p.py's words_of): one to one where they are as many; else clause by
 * clause where text and phonemes have as many clauses, a clause whose counts differ becoming
 * one word; else the whole text one word. */
export function wordsOf(text, phonemes) {
  const parts = phonemes.split(" ");
  const word = (texts, spoken, last) => (
    { text: texts.join(" "), phonemes: spoken.join(" "), whitespace: last ? "" : " " });
  const matched = (texts, spoken, last) => (texts.length === spoken.length
    ? texts.map((t, i) => word([t], [spoken[i]], last && i === texts.length - 1))
    : [word(texts, spoken, last)]);
  const texts = text.split(/\s+/u).filter((t) => t);
  if (texts.length === parts.length) return matched(texts, parts, true);
  const textClauses = text.trim().split(TEXT_CLAUSE_END).filter((c) => c.trim())
    .map((c) => c.split(/\s+/u).filter((t) => t));
  const phonemeClauses = [];
  let clause = [];
  for (const part of parts) {
    clause.push(part);
    if (PHONEME_CLAUSE_END.test(part)) {
      phonemeClauses.push(clause);
      clause = [];
    }
  }
  if (clause.length) phonemeClauses.push(clause);
  if (textClauses.length !== phonemeClauses.length) return [word([text.trim()], parts, true)];
  return textClauses.flatMap((t, i) => matched(t, phonemeClauses[i], i === textClauses.length - 1));
}

/** English text -> the text's words [{text, phonemes, whitespace}]: misaki's tokens with no
 * whitespace between them ("world" and ",") made one word, as a caption shows them (the Python
 * runtime's words, kokoro_tvm/runtime/g2p.py's _misaki_words). */
export function readWords(lexicon, text) {
  const words = [];
  let held = { text: "", phonemes: "" };
  const tokens = phonemizeWords(lexicon, text);
  tokens.forEach((token, i) => {
    held = { text: held.text + token.text, phonemes: held.phonemes + token.phonemes };
    if (token.whitespace || i === tokens.length - 1) {
      words.push({ text: held.text.trim(), phonemes: held.phonemes,
                   whitespace: token.whitespace });
      held = { text: "", phonemes: "" };
    }
  });
  return words;
}

/** English text -> the phoneme string Kokoro is given. */
export function phonemize(lexicon, text) { return phonemesOf(phonemizeWords(lexicon, text)); }
