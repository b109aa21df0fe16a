// The model loader (kokoro_tvm/web/loader.js) on a folder served by a fake fetch: the manifest,
// each file's size and sha256 checked before use, a changed file refused in one line naming it.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import test from "node:test";

import { loadModel, ModelError } from "../../kokoro_tvm/web/loader.js";
import { tinyPlan } from "./fixtures.mjs";

const BASE = "http://localhost:8000/model/";
const encode = (text) => new TextEncoder().encode(text);

/** A two-tensor weights file, a plan, a voice and a config, with their manifest. */
function folder() {
  const weights = new Uint8Array(20);
  new Float32Array(weights.buffer, 0, 4).set([1, 2, 3, 4]);
  new Int32Array(weights.buffer, 16, 1).set([7]);
  const files = {
    "lib/bert/none/b16.plan.json": encode(JSON.stringify(tinyPlan())),
    "weights/bert.bin": weights,
    "voices/af_heart.bin": new Uint8Array(new Float32Array([0.5, -0.5]).buffer),
    "config.json": encode(JSON.stringify({ vocab: { a: 1 } })),
  };
  const manifest = {
    format: "kokoro-tvm-web", version: 1, sample_rate: 24000, config: "config.json",
    components: [{ name: "bert", lstm: "none", buckets: [16] }],
    libraries: [{ component: "bert", lstm: "none", bucket: 16, plan: "lib/bert/none/b16.plan.json",
                  transforms: { main: "f00d" }, validated: true }],
    weights: { bert: { file: "weights/bert.bin", tensors: [
      { name: "w", dtype: "float32", storage: "float32", shape: [2, 2], offset: 0, bytes: 16 },
      { name: "n", dtype: "int64", storage: "int32", shape: [1], offset: 16, bytes: 4 }] } },
    voices: { af_heart: { file: "voices/af_heart.bin", dtype: "float32", shape: [1, 1, 2] } },
    files: Object.fromEntries(Object.entries(files).map(([path, bytes]) => [path, {
      sha256: createHash("sha256").update(bytes).digest("hex"), bytes: bytes.length }])),
  };
  files["manifest.json"] = encode(JSON.stringify(manifest));
  return files;
}

/** A fetch of `files` under BASE that records what it was asked for. */
function serving(files) {
  const asked = [];
  const fetch = async (url) => {
    asked.push(url);
    const path = url.startsWith(BASE) ? url.slice(BASE.length) : null;
    if (path === null || !(path in files)) return new Response("not found", { status: 404 });
    return new Response(files[path]);
  };
  return { fetch, asked };
}

async function refused(promise, pattern) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof ModelError, String(error));
    assert.match(error.message, pattern);
    assert.ok(!error.message.includes("\n"), `not one line: ${error.message}`);
    return true;
  });
}

test("a folder's manifest, plan, weights, voice and config are read and checked", async () => {
  const { fetch, asked } = serving(folder());
  const model = await loadModel(BASE, { fetch });
  assert.equal(model.sampleRate, 24000);
  assert.deepEqual(model.voices, ["af_heart"]);
  const plan = await model.plan("bert", 16);
  assert.equal(plan.format, "kokoro-tvm-webgpu-plan");
  const weights = await model.weights("bert");
  assert.deepEqual([...weights.get("w").data], [1, 2, 3, 4]);
  assert.deepEqual(weights.get("w").shape, [2, 2]);
  assert.ok(weights.get("n").data instanceof Int32Array);
  assert.deepEqual([...weights.get("n").data], [7]);
  assert.deepEqual([...(await model.voice("af_heart")).data], [0.5, -0.5]);
  assert.deepEqual(await model.config(), { vocab: { a: 1 } });
  await model.weights("bert");  // fetched once
  assert.deepEqual(asked.map((url) => url.slice(BASE.length)), [
    "manifest.json", "lib/bert/none/b16.plan.json", "weights/bert.bin", "voices/af_heart.bin",
    "config.json"]);
  assert.ok(asked.every((url) => url.startsWith(BASE)));
});

test("a changed file is refused in one line naming it, before it is used", async () => {
  const files = folder();
  files["weights/bert.bin"] = files["weights/bert.bin"].slice();
  files["weights/bert.bin"][3] ^= 1;
  const model = await loadModel(BASE, serving(files));
  await refused(model.weights("bert"), new RegExp(
    `^${BASE}weights/bert\\.bin does not match the manifest's sha256 \\([0-9a-f]{64}, not ` +
    "[0-9a-f]{64}\\): refused \\(rebuild the folder with `snakemake web`\\)$"));
  files["voices/af_heart.bin"] = new Uint8Array(12);
  await refused(model.voice("af_heart"), /af_heart\.bin has 12 bytes, not the manifest's 8: refused/);
});

test("a missing file, an unlisted one and a manifest of another format are refused", async () => {
  const files = folder();
  delete files["config.json"];
  const model = await loadModel(BASE, serving(files));
  await refused(model.config(), /config\.json cannot be fetched \(HTTP 404\)/);
  await refused(model.file("../secret"), /\.\.\/secret is not in .*manifest\.json/);
  await refused(model.voice("am_adam"), /has no voice am_adam; it has af_heart/);
  assert.throws(() => model.library("bert", 64), /no bert library at bucket 64; its buckets: 16/);
  const other = folder();
  other["manifest.json"] = encode(JSON.stringify({ format: "kokoro-tvm-web", version: 2 }));
  await refused(loadModel(BASE, serving(other)),
                /manifest\.json is not a browser model folder's manifest of version 1 \(format kokoro-tvm-web, version 2\)/);
  await refused(loadModel("http://localhost:8000/elsewhere", serving(folder())),
                /elsewhere\/manifest\.json cannot be fetched \(HTTP 404\)/);
});

test("a blend of voices is their weighted sum, weights normalised; a malformed one refused", async () => {
  const files = folder();
  files["voices/am_adam.bin"] = new Uint8Array(new Float32Array([0.25, 0.75]).buffer);
  const manifest = JSON.parse(new TextDecoder().decode(files["manifest.json"]));
  manifest.voices.am_adam = { ...manifest.voices.af_heart, file: "voices/am_adam.bin" };
  manifest.files["voices/am_adam.bin"] = {
    sha256: createHash("sha256").update(files["voices/am_adam.bin"]).digest("hex"), bytes: 8 };
  files["manifest.json"] = encode(JSON.stringify(manifest));
  const model = await loadModel(BASE, serving(files));
  assert.deepEqual([...(await model.voice("af_heart:3, am_adam:1")).data], [0.4375, -0.1875]);
  assert.deepEqual([...(await model.voice("am_adam")).data], [0.25, 0.75]);
  // An empty weight is 1, as runtime/voices.py reads it.
  assert.deepEqual([...(await model.voice("af_heart:,am_adam:1")).data], [0.375, 0.125]);
  await refused(model.voice("af_heart:x"), /^voice 'af_heart:x': weight 'x' of af_heart is not a number$/);
  await refused(model.voice("af_heart:1,:2"), /expected NAME or NAME:WEIGHT,NAME:WEIGHT/);
  await refused(model.voice("af_heart:-1"), /weight -1 of af_heart must be a finite number/);
  await refused(model.voice("af_heart:0"), /weights must add up to more than 0/);
  await refused(model.voice("af_heart:1,bf_emma:1"), /has no voice bf_emma; it has af_heart, am_adam/);
});
