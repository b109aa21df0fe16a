// A browser-shaped model folder (results/web/model, written by `snakemake web`:
// kokoro_tvm/stages/web.py; docs/browser.md) fetched from its URL: the manifest first, then each
// file when it is first needed, its size and sha256 (crypto.subtle) checked against the
// manifest before it is used; a file that does not match is refused in one line naming it.
// Nothing is fetched from anywhere but the folder's URL.

import { ESPEAK, Espeak } from "./espeak.js";
import { Lexicon } from "./g2p.js";
import { PlanLibrary, PlanWeights } from "./player.js";
import { readPlan } from "./plan.js";

export const WEB_FORMAT = "kokoro-tvm-web";
export const WEB_VERSION = 1;
export const MANIFEST = "manifest.json";

const ARRAYS = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array };

export class ModelError extends Error {
  constructor(message) {
    super(message);
    this.name = "ModelError";
  }
}

/** 'a:0.7,b:0.3' -> [["a", 0.7], ["b", 0.3]], a bare name weighing 1; a malformed blend
 * refused in runtime/voices.py's words. */
export function parseBlend(spec) {
  const parts = spec.split(",").map((item) => {
    const [name, weight] = item.trim().split(/:(.*)/s);
    const value = weight ? Number(weight) : 1;  // no weight, or an empty one: 1
    if (Number.isNaN(value)) {
      throw new ModelError(`voice '${spec}': weight '${weight}' of ${name} is not a number`);
    }
    return [name.trim(), value];
  });
  if (parts.some(([name]) => !name)) {
    throw new ModelError(`voice '${spec}': expected NAME or NAME:WEIGHT,NAME:WEIGHT`);
  }
  for (const [name, weight] of parts) {
    if (!Number.isFinite(weight) || weight < 0) {
      throw new ModelError(`voice '${spec}': weight ${weight} of ${name} must be a finite ` +
                           "number of 0 or more (weights are normalised to add up to 1)");
    }
  }
  if (parts.reduce((sum, [, weight]) => sum + weight, 0) <= 0) {
    throw new ModelError(`voice '${spec}': weights must add up to more than 0`);
  }
  return parts;
}

function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The sha256 of `bytes` (an ArrayBuffer), in hex. */
export async function sha256(bytes) {
  return hex(await globalThis.crypto.subtle.digest("SHA-256", bytes));
}

/** The model folder at `url` (its manifest read and checked); `fetch` for tests. */
export async function loadModel(url, { fetch = globalThis.fetch.bind(globalThis) } = {}) {
  const base = new URL(String(url).endsWith("/") ? url : `${url}/`, globalThis.location?.href);
  const where = new URL(MANIFEST, base).href;
  const response = await fetched(fetch, where);
  let manifest;
  try {
    manifest = JSON.parse(await response.text());
  } catch (error) {
    throw new ModelError(`${where} is not JSON (${error.message}): rebuild the folder with ` +
                         "`snakemake web`");
  }
  if (manifest?.format !== WEB_FORMAT || manifest?.version !== WEB_VERSION) {
    throw new ModelError(`${where} is not a browser model folder's manifest of version ` +
                         `${WEB_VERSION} (format ${manifest?.format}, version ` +
                         `${manifest?.version}): rebuild the folder with \`snakemake web\``);
  }
  return new WebModel(base, manifest, fetch);
}

async function fetched(fetch, url) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new ModelError(`${url} cannot be fetched (${error.message})`);
  }
  if (!response.ok) throw new ModelError(`${url} cannot be fetched (HTTP ${response.status})`);
  return response;
}

/** A model folder's files, fetched and checked once each. */
export class WebModel {
  constructor(base, manifest, fetch) {
    this.base = base;
    this.manifest = manifest;
    this.fetch = fetch;
    this.files = new Map();
    this.componentWeights = new Map();
  }

  get sampleRate() { return this.manifest.sample_rate; }

  get voices() { return Object.keys(this.manifest.voices).sort(); }

  /** The file at `path` (relative to the folder) as an ArrayBuffer, after checking its size and
   * sha256 against the manifest. */
  file(path) {
    if (!this.files.has(path)) {
      const promise = this.checked(path);
      promise.catch(() => this.files.delete(path));  // a failed fetch may be retried
      this.files.set(path, promise);
    }
    return this.files.get(path);
  }

  async checked(path) {
    const expected = this.manifest.files[path];
    if (expected === undefined) {
      throw new ModelError(`${path} is not in ${new URL(MANIFEST, this.base).href}`);
    }
    const url = new URL(path, this.base).href;
    const bytes = await (await fetched(this.fetch, url)).arrayBuffer();
    if (bytes.byteLength !== expected.bytes) {
      throw new ModelError(`${url} has ${bytes.byteLength} bytes, not the manifest's ` +
                           `${expected.bytes}: refused (rebuild the folder with \`snakemake web\`)`);
    }
    const digest = await sha256(bytes);
    if (digest !== expected.sha256) {
      throw new ModelError(`${url} does not match the manifest's sha256 (${digest}, not ` +
                           `${expected.sha256}): refused (rebuild the folder with ` +
                           "`snakemake web`)");
    }
    return bytes;
  }

  async text(path) { return new TextDecoder().decode(await this.file(path)); }

  /** The model config (with the phoneme vocabulary). */
  async config() { return JSON.parse(await this.text(this.manifest.config)); }

  component(name) {
    const found = this.manifest.components.find((c) => c.name === name);
    if (!found) throw new ModelError(`the model has no component ${name}`);
    return found;
  }

  /** `component`'s library entry at `bucket` (its plan, LSTM lowering, transforms). */
  library(component, bucket) {
    const entry = this.manifest.libraries.find(
      (e) => e.component === component && e.bucket === bucket);
    if (!entry) {
      throw new ModelError(`the model has no ${component} library at bucket ${bucket}; its ` +
                           `buckets: ${this.component(component).buckets.join(", ")}`);
    }
    return entry;
  }

  /** The plan of `component` at `bucket`, checked (./plan.js). */
  async plan(component, bucket) {
    const path = this.library(component, bucket).plan;
    return readPlan(await this.text(path), new URL(path, this.base).href);
  }

  /** `component`'s weights: name -> {data, shape, dtype}, views of its one weights file. */
  async weights(component) {
    const table = this.manifest.weights[component];
    if (!table) throw new ModelError(`the model has no weights of ${component}`);
    const bytes = await this.file(table.file);
    return new Map(table.tensors.map((t) => [t.name, {
      data: new ARRAYS[t.storage](bytes, t.offset, t.bytes / 4), shape: t.shape, dtype: t.dtype,
    }]));
  }

  /** The English G2P's lexicons of `lang` (./g2p.js), fetched and checked once. */
  async lexicon(lang = "en-us") {
    const file = this.manifest.g2p?.[lang];
    if (!file) {
      throw new ModelError(`the model has no G2P for ${lang}; it has ` +
                           `${Object.keys(this.manifest.g2p ?? {}).join(", ") || "none"}`);
    }
    this.lexicons ??= new Map();
    if (!this.lexicons.has(lang)) {
      this.lexicons.set(lang, this.text(file).then((text) => new Lexicon(JSON.parse(text))));
    }
    return this.lexicons.get(lang);
  }

  /** The language of `voice` (the first letter of its name): {code, name, g2p}, g2p the
   * manifest's g2p key that reads it, or null where no browser G2P does. */
  language(voice) {
    const language = this.manifest.languages?.[voice[0]];
    if (!language) {
      throw new ModelError(`voice ${voice} is not named as Kokoro names voices (its first ` +
                           "letter is its language)");
    }
    if (!language.g2p) {
      throw new ModelError(`no G2P in this browser module reads ${language.name} (voice ` +
                           `${voice}), as the Python runtime does: speak it with kokoro-tvm ` +
                           "say or serve");
    }
    return language;
  }

  /** eSpeak NG in WebAssembly (./espeak.js), its data fetched and checked, loaded once. */
  async espeak() {
    this.espeakLoaded ??= Promise.all([
      import(new URL("./espeak-ng.js", import.meta.url).href),
      this.file(this.manifest.g2p[ESPEAK]),
    ]).then(([module, data]) => Espeak.load(module.default, data));
    return this.espeakLoaded;
  }

  /** A voice's style table, or a blend's ('af_heart:0.7,am_adam:0.3', weights normalised, in
   * float32 as runtime/voices.py's load_voice sums them): {data: Float32Array, shape: [tokens,
   * 1, 2 * style_dim]}. */
  async voice(spec) {
    const parts = parseBlend(spec);
    for (const [name] of parts) {
      if (!this.manifest.voices[name]) {
        throw new ModelError(`the model has no voice ${name}; it has ${this.voices.join(", ")}`);
      }
    }
    const tables = await Promise.all(parts.map(async ([name]) => new Float32Array(
      await this.file(this.manifest.voices[name].file))));
    const { shape, dtype } = this.manifest.voices[parts[0][0]];
    if (parts.length === 1) return { data: tables[0], shape, dtype };
    const total = parts.reduce((sum, [, weight]) => sum + weight, 0);
    const data = new Float32Array(tables[0].length);
    parts.forEach(([, weight], i) => {
      const share = Math.fround(weight / total);
      for (let j = 0; j < data.length; j++) data[j] += Math.fround(share * tables[i][j]);
    });
    return { data, shape, dtype };
  }

  /** `component`'s library at `bucket` on `device` (a WebGpuDevice): a PlanLibrary sharing the
   * component's uploaded and prepared weights with its other buckets. */
  async open(device, component, bucket) {
    const entry = this.library(component, bucket);
    const plan = await this.plan(component, bucket);
    if (!this.componentWeights.has(component)) {
      this.componentWeights.set(component, this.weights(component).then(
        (tensors) => new PlanWeights(device, tensors)));
    }
    const weights = await this.componentWeights.get(component);
    return new PlanLibrary(plan, weights, { transforms: entry.transforms,
                                            name: new URL(entry.plan, this.base).href });
  }
}
