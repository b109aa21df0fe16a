// WAV files from float samples (kokoro_tvm/web/wav.js).
import assert from "node:assert/strict";
import test from "node:test";

import { pcm16, toWav, wavBytes } from "../../kokoro_tvm/web/wav.js";

test("samples become 16-bit PCM as the runtime's pcm16: clipped, x32767, half to even", () => {
  assert.deepEqual([...pcm16(new Float32Array([0, 1, -1, 2, -3, 0.5, -0.5]))],
                   [0, 32767, -32767, 32767, -32767, 16384, -16384]);
  // Ties (x32767 in float32 exactly k + 0.5) go to the even neighbour, as numpy's round does.
  const ties = [16382.5, 16381.5, -16382.5, 2.5, 6.5].map((x) => Math.fround(x / 32767));
  assert.deepEqual([...pcm16(new Float32Array(ties))], [16382, 16382, -16382, 2, 6]);
});

test("a WAV file is a 44-byte RIFF header and the samples, little-endian", () => {
  const bytes = new Uint8Array(wavBytes(new Float32Array([0, 1, -1]), 24000));
  const text = (from, to) => String.fromCharCode(...bytes.subarray(from, to));
  const view = new DataView(bytes.buffer);
  assert.equal(bytes.length, 50);
  assert.equal(text(0, 4), "RIFF");
  assert.equal(view.getUint32(4, true), 42);
  assert.equal(text(8, 16), "WAVEfmt ");
  assert.deepEqual([view.getUint32(16, true), view.getUint16(20, true), view.getUint16(22, true),
                    view.getUint32(24, true), view.getUint32(28, true), view.getUint16(32, true),
                    view.getUint16(34, true)], [16, 1, 1, 24000, 48000, 2, 16]);
  assert.equal(text(36, 40), "data");
  assert.equal(view.getUint32(40, true), 6);
  assert.deepEqual([view.getInt16(44, true), view.getInt16(46, true), view.getInt16(48, true)],
                   [0, 32767, -32767]);
});

test("toWav gives an audio/wav Blob; a sample rate is required", async () => {
  const blob = toWav([0.25], 24000);
  assert.equal(blob.type, "audio/wav");
  assert.equal(blob.size, 46);
  assert.throws(() => wavBytes([0]), /needs a sample rate in Hz/);
});
