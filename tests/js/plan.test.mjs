// The plan reader (kokoro_tvm/web/plan.js) and the player's input padding, without a GPU.
import assert from "node:assert/strict";
import test from "node:test";

import { PlanError, readPlan } from "../../kokoro_tvm/web/plan.js";
import { PlanLibrary } from "../../kokoro_tvm/web/player.js";
import { tinyPlan } from "./fixtures.mjs";

function refused(plan, pattern) {
  assert.throws(() => readPlan(plan, "b16.plan.json"), (error) => {
    assert.ok(error instanceof PlanError);
    assert.match(error.message, pattern);
    assert.ok(!error.message.includes("\n"), `not one line: ${error.message}`);
    return true;
  });
}

test("a plan of this format and version is read, from JSON text or an object", () => {
  const plan = tinyPlan();
  assert.deepEqual(readPlan(JSON.stringify(plan)), plan);
  assert.equal(readPlan(plan), plan);
});

test("another format or version is refused in one line, as the Python player says it", () => {
  refused({ ...tinyPlan(), version: 2 }, new RegExp(
    "^b16\\.plan\\.json is not a webgpu plan of version 1 \\(format 'kokoro-tvm-webgpu-plan', " +
    "version 2\\): rebuild it with snakemake$"));
  const { format, ...unformatted } = tinyPlan();
  refused(unformatted, /\(format None, version 1\)/);
  refused("{not json", /^b16\.plan\.json is not JSON/);
  refused("[]", /is not a webgpu plan/);
});

test("broken references between a plan's parts are refused in one line", () => {
  const plan = tinyPlan();
  plan.functions.main.dispatches[0].kernel = "gone";
  refused(plan, /function main's dispatch 0 runs no kernel gone/);
  const short = tinyPlan();
  short.functions.main.dispatches[0].bindings = [0, 1];
  refused(short, /binds 2 slots to add, which has 3 bindings/);
  const unbound = tinyPlan();
  unbound.functions.main.dispatches[0].bindings = [0, 1, 9];
  refused(unbound, /binds no slot 9/);
  const output = tinyPlan();
  output.functions.main.outputs[0].slot = 7;
  refused(output, /output slot 7 is not a slot/);
  const weights = tinyPlan();
  weights.functions.main_transform_params.outputs = [];
  refused(weights, /main takes 1 weights but its transform prepares 0/);
  const inputs = tinyPlan();
  inputs.functions.main.num_input = 2;
  refused(inputs, /has 1 input slots, not its num_input 2/);
});

test("a smaller input is zero-padded to its planned shape, a larger one refused", async () => {
  const library = new PlanLibrary(tinyPlan(), { device: null }, { name: "b16.plan.json" });
  const slot = tinyPlan().functions.main.slots[0];
  const padded = await library.fit({ data: [1, 2, 3, 4, 5, 6], shape: [1, 2, 3] }, slot);
  assert.ok(padded instanceof Float32Array);
  assert.deepEqual([...padded], [1, 2, 3, 0, 4, 5, 6, 0]);
  const rows = await library.fit({ data: new Float32Array([1, 2, 3, 4]), shape: [1, 1, 4] }, slot);
  assert.deepEqual([...rows], [1, 2, 3, 4, 0, 0, 0, 0]);
  const same = new Float32Array(8);
  assert.equal(await library.fit({ data: same, shape: [1, 2, 4] }, slot), same);
  await assert.rejects(library.fit({ data: new Float32Array(10), shape: [1, 2, 5] }, slot),
                       /input x of shape \[1,2,5\] does not fit its planned shape \[1,2,4\]/);
  await assert.rejects(library.fit({ data: new Float32Array(3), shape: [1, 2, 4] }, slot),
                       /has 3 values, not the 8 of its shape/);
});

test("inputs are stored in their slot's 32-bit type; integers beyond int32 refused", async () => {
  const library = new PlanLibrary(tinyPlan(), { device: null });
  const mask = { name: "mask", shape: [3], dtype: "bool", storage: "int32" };
  assert.deepEqual(await library.fit({ data: [true, false, true] }, mask), new Int32Array([1, 0, 1]));
  const ids = { name: "ids", shape: [2], dtype: "int64", storage: "int32" };
  assert.deepEqual(await library.fit({ data: new BigInt64Array([5n, -1n]) }, ids),
                   new Int32Array([5, -1]));
  await assert.rejects(library.fit({ data: new BigInt64Array([2n ** 40n, 0n]) }, ids),
                       /values beyond int32 cannot go to WebGPU/);
});
