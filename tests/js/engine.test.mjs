// The host side of Kokoro's chain in the browser (kokoro_tvm/web/engine.js), as the Python
// engine computes it (kokoro_tvm/runtime/engine.py, voices.py, abi.py).
import assert from "node:assert/strict";
import test from "node:test";

import { fit, frameTokens, framesOf, noiseKey, styleFor } from "../../kokoro_tvm/web/engine.js";

test("the smallest bucket that holds the size; none: one line naming the largest", () => {
  assert.equal(fit("bert", [32, 64, 16], 17), 32);
  assert.equal(fit("bert", [32, 64, 16], 16), 16);
  assert.throws(() => fit("decoder", [32, 64], 65),
                /decoder needs a bucket of at least 65 \(the model's largest: 64\)/);
});

test("durations become frames as numpy rounds them: halves to even, at least one", () => {
  assert.deepEqual(framesOf(new Float32Array([2.5, 3.5, 0.2, 4.49, 7]), 1), [2, 4, 1, 4, 7]);
  assert.deepEqual(framesOf([5, 3], 2), [2, 2]);  // 2.5 -> 2, 1.5 -> 2
});

test("each frame's token repeats the token its frames", () => {
  assert.deepEqual([...frameTokens([2, 1, 3])], [0, 0, 1, 2, 2, 2]);
});

test("a seed's key is its low and high 32-bit words; other seeds are refused", () => {
  assert.deepEqual([...noiseKey(0)], [0, 0]);
  assert.deepEqual([...noiseKey(2 ** 32 + 5)], [5, 1]);
  assert.throws(() => noiseKey(-1), RangeError);
  assert.throws(() => noiseKey(1.5), RangeError);
});

test("a voice's style is the row of its token count, clamped to the table", () => {
  const voice = { data: Float32Array.from({ length: 12 }, (_, i) => i), shape: [3, 1, 4] };
  assert.deepEqual([...styleFor(voice, 2)], [4, 5, 6, 7]);
  assert.deepEqual([...styleFor(voice, 0)], [0, 1, 2, 3]);
  assert.deepEqual([...styleFor(voice, 9)], [8, 9, 10, 11]);
});
