// A webgpu library's launch plan (docs/other-targets.md, "The plan format (version 1)"), read
// and checked before anything runs: the format and version in one line, as the Python player's
// read_plan (kokoro_tvm/runtime/webgpu.py) says it, then the references between its parts.

export const PLAN_FORMAT = "kokoro-tvm-webgpu-plan";
export const PLAN_VERSION = 1;
// A function `f` comes with `f + TRANSFORM_SUFFIX`, its weight transform (kokoro_tvm/abi.py).
export const TRANSFORM_SUFFIX = "_transform_params";
// The 32-bit type each tensor dtype is stored in (abi.WEBGPU_STORAGE).
export const STORAGE = {
  bool: "int32", int8: "int32", uint8: "int32", int64: "int32",
  float32: "float32", int32: "int32", uint32: "uint32",
};

export class PlanError extends Error {
  constructor(message) {
    super(message);
    this.name = "PlanError";
  }
}

/** The plan document `plan` (an object, or its JSON text), checked; `name` says which file it
 * is in messages. Throws a PlanError in one line. */
export function readPlan(plan, name = "plan") {
  if (typeof plan === "string") {
    try {
      plan = JSON.parse(plan);
    } catch (error) {
      throw new PlanError(`${name} is not JSON (${error.message}): rebuild it with snakemake`);
    }
  }
  if (plan === null || typeof plan !== "object" || Array.isArray(plan)) {
    throw new PlanError(`${name} is not a webgpu plan: rebuild it with snakemake`);
  }
  if (plan.format !== PLAN_FORMAT || plan.version !== PLAN_VERSION) {
    throw new PlanError(
      `${name} is not a webgpu plan of version ${PLAN_VERSION} (format ${repr(plan.format)}, ` +
        `version ${repr(plan.version)}): rebuild it with snakemake`);
  }
  checkReferences(plan, name);
  return plan;
}

function repr(value) {
  return value === undefined ? "None" : typeof value === "string" ? `'${value}'` : String(value);
}

/** Every dispatch's kernel, slots and binding count, every output's slot and every function's
 * transform exist as the format says. */
function checkReferences(plan, name) {
  const fail = (what) => { throw new PlanError(`${name}: ${what}: rebuild it with snakemake`); };
  if (typeof plan.kernels !== "object" || typeof plan.functions !== "object") {
    fail("it has no kernels or functions");
  }
  for (const [kernelName, kernel] of Object.entries(plan.kernels)) {
    if (typeof kernel.wgsl !== "string" || !Array.isArray(kernel.bindings)) {
      fail(`kernel ${kernelName} has no wgsl or bindings`);
    }
    kernel.bindings.forEach((binding, i) => {
      if (binding.binding !== i || !["read", "read_write"].includes(binding.access)) {
        fail(`kernel ${kernelName}'s binding ${i} is not in slot order or has access ` +
             `${repr(binding.access)}`);
      }
    });
  }
  for (const [functionName, fn] of Object.entries(plan.functions)) {
    const where = `function ${functionName}`;
    if (!Array.isArray(fn.slots) || !Array.isArray(fn.dispatches) || !Array.isArray(fn.outputs)) {
      fail(`${where} has no slots, dispatches or outputs`);
    }
    const slots = new Map(fn.slots.map((slot) => [slot.slot, slot]));
    for (const slot of fn.slots) {
      if (!["input", "weight", "constant", "storage"].includes(slot.kind)) {
        fail(`${where}'s slot ${slot.slot} is of kind ${repr(slot.kind)}`);
      }
    }
    const inputs = fn.slots.filter((slot) => slot.kind === "input").length;
    if (inputs !== fn.num_input) {
      fail(`${where} has ${inputs} input slots, not its num_input ${fn.num_input}`);
    }
    fn.dispatches.forEach((dispatch, i) => {
      const kernel = plan.kernels[dispatch.kernel];
      if (kernel === undefined) fail(`${where}'s dispatch ${i} runs no kernel ${dispatch.kernel}`);
      if (dispatch.bindings.length !== kernel.bindings.length) {
        fail(`${where}'s dispatch ${i} binds ${dispatch.bindings.length} slots to ` +
             `${dispatch.kernel}, which has ${kernel.bindings.length} bindings`);
      }
      for (const slot of dispatch.bindings) {
        if (!slots.has(slot)) fail(`${where}'s dispatch ${i} binds no slot ${slot}`);
      }
      if (!Array.isArray(dispatch.grid) || dispatch.grid.length !== 3) {
        fail(`${where}'s dispatch ${i} has no grid of 3 extents`);
      }
    });
    for (const output of fn.outputs) {
      if (!slots.has(output.slot)) fail(`${where}'s output slot ${output.slot} is not a slot`);
    }
    if (!functionName.endsWith(TRANSFORM_SUFFIX)) {
      const transform = plan.functions[functionName + TRANSFORM_SUFFIX];
      const weights = fn.slots.filter((slot) => slot.kind === "weight").length;
      const prepared = transform === undefined ? 0 : transform.outputs.length;
      if (weights !== prepared) {
        fail(`${where} takes ${weights} weights but its transform prepares ${prepared}`);
      }
    }
  }
}

/** The bytes a tensor of `shape` takes in its 32-bit storage type (at least 4). */
export function tensorBytes(shape) {
  return Math.max(4, 4 * shape.reduce((a, b) => a * b, 1));
}

/** The input slots of function `name`, in the order the plan lists them. */
export function inputSlots(plan, name) {
  return plan.functions[name].slots.filter((slot) => slot.kind === "input");
}
