// Playing webgpu libraries (launch plans, ./plan.js) on the browser's WebGPU, with the
// semantics of the Python player, kokoro_tvm/runtime/webgpu.py:
// - the device is asked for WebGPU's default limits (the build checks every kernel against
//   them);
// - a component's weights are uploaded once (PlanWeights) and prepared once per function by
//   the library's weight transform, `{name}_transform_params`; libraries of a component whose
//   transform has the same fingerprint (the manifest's `transforms`) share what it prepared;
// - a function's buffers, pipelines, bind groups and uniforms are made when it is first called
//   and kept;
// - a call writes its inputs into the function's input buffers (an input smaller than its
//   planned shape zero-padded to it, as `align`'s token features are: PlanLibrary._fitted),
//   runs every dispatch in one compute pass, copies the outputs out (into new buffers, so a
//   later call leaves them as they are, or straight into buffers to read back) and submits it
//   all at once.
// A host tensor is `{data, shape}`: `data` a typed array or an array in row-major order
// (converted to the slot's 32-bit storage type; integers beyond int32 refused), `shape` its
// dimensions (the planned ones where left out).

import { readPlan, STORAGE, TRANSFORM_SUFFIX, tensorBytes } from "./plan.js";

export class WebGpuError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebGpuError";
  }
}

const ARRAYS = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array };
const READ_AS = { bool: Uint8Array, int8: Int8Array, uint8: Uint8Array };
const INT32 = [-(2 ** 31), 2 ** 31 - 1];

const count = (shape) => shape.reduce((a, b) => a * b, 1);
const padded4 = (size) => Math.max(4, Math.ceil(size / 4) * 4);
const firstLine = (text) => String(text).split("\n").find((line) => line.trim()) ?? String(text);

/** The WebGPU device of this page, with WebGPU's default limits. */
export class WebGpuDevice {
  constructor(adapter, device) {
    this.adapter = adapter;
    this.device = device;
    this.queue = device.queue;
    this.lost = null;
    device.lost.then((info) => { this.lost = info; });
  }

  /** The adapter `gpu` (navigator.gpu) gives, or a WebGpuError in one line. */
  static async request(gpu = globalThis.navigator?.gpu) {
    if (!gpu) {
      throw new WebGpuError("this browser offers no WebGPU (navigator.gpu is missing): use a " +
                            "browser with WebGPU enabled, on a page served over https or localhost");
    }
    const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
    if (!adapter) {
      throw new WebGpuError("this browser found no WebGPU adapter: enable WebGPU or its GPU " +
                            "driver (chrome://gpu says why)");
    }
    const device = await adapter.requestDevice();  // no required limits: the defaults
    return new WebGpuDevice(adapter, device);
  }

  /** One line: the adapter, as the browser names it. */
  describe() {
    const info = this.adapter.info ?? {};
    const name = [info.vendor, info.architecture, info.device, info.description]
      .filter(Boolean).join(" ") || "an unnamed adapter";
    return `WebGPU on ${name}${this.adapter.isFallbackAdapter ? " (fallback adapter)" : ""}`;
  }

  check() {
    if (this.lost) {
      throw new WebGpuError(`the WebGPU device was lost (${this.lost.reason}: ` +
                            `${firstLine(this.lost.message)}): reload the page`);
    }
  }

  buffer(size, usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC |
                       GPUBufferUsage.COPY_DST) {
    return this.device.createBuffer({ size: padded4(size), usage });
  }

  /** Host tensor `tensor` in a new buffer, stored as `dtype`'s storage type. */
  upload(tensor, dtype, name = "tensor") {
    const shape = tensor.shape;
    const data = stored(tensor.data, STORAGE[dtype] ?? dtype, name);
    const buffer = this.buffer(data.byteLength);
    this.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
    return new GpuTensor(this, buffer, shape, dtype, STORAGE[dtype] ?? dtype);
  }
}

/** `data` as the typed array of `storage` (a copy where its type differs). */
function stored(data, storage, name) {
  const Type = ARRAYS[storage];
  if (Type === undefined) throw new WebGpuError(`${name}: no WebGPU storage type ${storage}`);
  if (data instanceof Type) return data;
  const big = data instanceof BigInt64Array || data instanceof BigUint64Array;
  if (storage === "int32" && (big || !(data instanceof Float32Array))) {
    for (const value of data) {
      if (value < INT32[0] || value > INT32[1]) {
        throw new WebGpuError(`${name}: values beyond int32 cannot go to WebGPU`);
      }
    }
  }
  return big ? Type.from(data, Number) : Type.from(data);
}

/** A tensor in a WebGPU buffer: its logical shape and dtype, and the dtype it is stored as. */
export class GpuTensor {
  constructor(device, buffer, shape, dtype, storage) {
    Object.assign(this, { device, buffer, shape: [...shape], dtype, storage });
  }

  get bytes() { return tensorBytes(this.shape); }

  /** The tensor on the host, `{data, shape, dtype}`. */
  async read() {
    const staging = this.device.buffer(this.bytes, GPUBufferUsage.MAP_READ |
                                                   GPUBufferUsage.COPY_DST);
    const encoder = this.device.device.createCommandEncoder();
    encoder.copyBufferToBuffer(this.buffer, 0, staging, 0, this.bytes);
    this.device.queue.submit([encoder.finish()]);
    return readBack(staging, this);
  }
}

async function readBack(staging, tensor) {
  await staging.mapAsync(GPUMapMode.READ);
  const raw = new ARRAYS[tensor.storage](staging.getMappedRange().slice(0),
                                         0, count(tensor.shape));
  staging.unmap();
  staging.destroy();
  return { data: asDtype(raw, tensor.dtype, tensor.storage), shape: [...tensor.shape],
           dtype: tensor.dtype };
}

function asDtype(raw, dtype, storage) {
  if (dtype === storage) return raw;
  if (dtype === "bool") return Uint8Array.from(raw, (v) => (v ? 1 : 0));
  if (dtype === "int64") return BigInt64Array.from(raw, (v) => BigInt(v));
  return (READ_AS[dtype] ?? ARRAYS[storage]).from(raw);
}

/** One component's weights (name -> host tensor `{data, shape, dtype}`), each uploaded when a
 * transform first needs it and kept; and the prepared weights its libraries share. */
export class PlanWeights {
  constructor(device, tensors) {
    this.device = device;
    this.tensors = tensors instanceof Map ? tensors : new Map(Object.entries(tensors));
    this.uploaded = new Map();
    this.byTransform = new Map();
  }

  has(name) { return this.tensors.has(name); }

  get(name) {
    if (!this.uploaded.has(name)) {
      const tensor = this.tensors.get(name);
      this.uploaded.set(name, this.device.upload(tensor, tensor.dtype ?? "float32", name));
    }
    return this.uploaded.get(name);
  }

  /** Frees the uploaded weights (the prepared ones stay): once every function is prepared. */
  release() {
    for (const tensor of this.uploaded.values()) tensor.buffer.destroy();
    this.uploaded.clear();
  }
}

/** One planned function on a device: its buffers, pipelines, bind groups and uniforms. */
class PlannedFunction {
  static async create(device, plan, pipeline, weights, where) {
    const steps = await Promise.all(plan.dispatches.map((d) => pipeline(d.kernel)));
    return new PlannedFunction(device, plan, steps, weights, where);
  }

  constructor(device, plan, pipelines, weights, where) {
    this.device = device;
    this.plan = plan;
    this.where = where;
    this.inputs = plan.slots.filter((slot) => slot.kind === "input");
    const weightSlots = plan.slots.filter((slot) => slot.kind === "weight");
    if (weightSlots.length !== weights.length) {
      throw new WebGpuError(`${where} takes ${weightSlots.length} weights, given ${weights.length}`);
    }
    const buffers = new Map();
    this.owned = [];
    for (const slot of plan.slots) {
      if (slot.kind === "constant") {
        const bytes = Uint8Array.from(atob(slot.data), (c) => c.charCodeAt(0));
        const data = new Uint8Array(padded4(Math.max(slot.bytes, bytes.length)));
        data.set(bytes);
        const buffer = device.buffer(slot.bytes);
        device.queue.writeBuffer(buffer, 0, data, 0, buffer.size);
        buffers.set(slot.slot, buffer);
      } else if (slot.kind === "storage" || slot.kind === "input") {
        buffers.set(slot.slot, device.buffer(slot.kind === "storage" ? slot.bytes
                                                                     : tensorBytes(slot.shape)));
      }
      if (buffers.has(slot.slot)) this.owned.push(buffers.get(slot.slot));
    }
    weightSlots.forEach((slot, i) => buffers.set(slot.slot, weights[i].buffer));
    this.buffers = buffers;
    this.steps = plan.dispatches.map((dispatch, i) => {
      const { pipeline, layout } = pipelines[i];
      const words = new Uint32Array(dispatch.uniform);
      const uniform = device.buffer(Math.ceil(words.byteLength / 16) * 16 || 16,
                                    GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
      device.queue.writeBuffer(uniform, 0, words);
      this.owned.push(uniform);
      const entries = dispatch.bindings.map((slot, binding) => (
        { binding, resource: { buffer: buffers.get(slot) } }));
      entries.push({ binding: entries.length, resource: { buffer: uniform } });
      const group = device.device.createBindGroup({ layout, entries });
      return { pipeline, group, grid: dispatch.grid };
    });
    this.outputs = plan.outputs;
  }

  /** Runs on `inputs` (GpuTensors or stored typed arrays, in input order, in planned shapes):
   * the outputs as new GpuTensors, or with `read` on the host; one submission. */
  async call(inputs, read = false) {
    const device = this.device;
    device.check();
    device.device.pushErrorScope("validation");
    const encoder = device.device.createCommandEncoder();
    this.inputs.forEach((slot, i) => {
      const input = inputs[i];
      const target = this.buffers.get(slot.slot);
      if (input instanceof GpuTensor) {
        encoder.copyBufferToBuffer(input.buffer, 0, target, 0, tensorBytes(slot.shape));
      } else {
        device.queue.writeBuffer(target, 0, input.buffer, input.byteOffset, input.byteLength);
      }
    });
    const pass = encoder.beginComputePass();
    for (const { pipeline, group, grid } of this.steps) {
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(...grid);
    }
    pass.end();
    const usage = read ? GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST : undefined;
    const out = this.outputs.map((output) => {
      const buffer = device.buffer(tensorBytes(output.shape), usage);
      encoder.copyBufferToBuffer(this.buffers.get(output.slot), 0, buffer, 0,
                                 tensorBytes(output.shape));
      return new GpuTensor(device, buffer, output.shape, output.dtype, output.storage);
    });
    device.queue.submit([encoder.finish()]);
    const error = await device.device.popErrorScope();
    if (error) throw new WebGpuError(`${this.where}: ${firstLine(error.message)}`);
    return read ? Promise.all(out.map((tensor) => readBack(tensor.buffer, tensor))) : out;
  }

  destroy() {
    for (const buffer of this.owned) buffer.destroy();
  }
}

/** One webgpu library (its plan document, or the plan's JSON text) and its component's
 * PlanWeights, called as the Python player's PlanLibrary: functions by name, inputs by name,
 * outputs on the host (`run`) or left on the device (`onDevice`). `transforms` are the
 * manifest's fingerprints of the library's weight transforms; `name` names it in messages. */
export class PlanLibrary {
  constructor(plan, weights, { transforms = {}, name = "plan" } = {}) {
    this.name = name;
    this.plan = readPlan(plan, name);
    this.weights = weights;
    this.device = weights.device;
    this.transforms = transforms;
    this.pipelines = new Map();
    this.functions = new Map();
    this.preparedWeights = new Map();
  }

  pipeline(kernelName) {
    if (!this.pipelines.has(kernelName)) {
      this.pipelines.set(kernelName, this.makePipeline(kernelName));
    }
    return this.pipelines.get(kernelName);
  }

  async makePipeline(kernelName) {
    const kernel = this.plan.kernels[kernelName];
    const device = this.device.device;
    const entries = kernel.bindings.map((binding) => ({
      binding: binding.binding, visibility: GPUShaderStage.COMPUTE,
      buffer: { type: binding.access === "read" ? "read-only-storage" : "storage" },
    }));
    entries.push({ binding: entries.length, visibility: GPUShaderStage.COMPUTE,
                   buffer: { type: "uniform" } });
    const layout = device.createBindGroupLayout({ entries });
    const module = device.createShaderModule({ code: kernel.wgsl });
    try {
      const pipeline = await device.createComputePipelineAsync({
        layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: kernelName },
      });
      return { pipeline, layout };
    } catch (error) {
      // The pipeline's error says only that the module is invalid; the module's says why.
      const info = await module.getCompilationInfo().catch(() => ({ messages: [] }));
      const first = info.messages.find((message) => message.type === "error");
      this.device.check();  // a lost device says so, rather than the module
      const why = first ? `line ${first.lineNum}: ${firstLine(first.message)}`
                        : firstLine(error.message);
      throw new WebGpuError(`${this.name}: kernel ${kernelName} does not compile on this ` +
                            `device (${why})`);
    }
  }

  planned(name, weights) {
    if (!this.functions.has(name)) {
      if (!(name in this.plan.functions)) {
        throw new WebGpuError(`${this.name} has no function ${name}`);
      }
      const where = `${this.name}: ${name}`;
      this.functions.set(name, PlannedFunction.create(
        this.device, this.plan.functions[name], (k) => this.pipeline(k), weights, where));
    }
    return this.functions.get(name);
  }

  /** `name`'s prepared weights: its transform run once on the component's weights, then
   * kept (shared with the component's other libraries whose transform has the same
   * fingerprint). */
  prepared(name) {
    if (!this.preparedWeights.has(name)) {
      const fingerprint = this.transforms[name];
      const shared = this.weights.byTransform;
      if (fingerprint !== undefined && shared.has(fingerprint)) {
        this.preparedWeights.set(name, shared.get(fingerprint));
      } else {
        const prepared = this.transform(name);
        this.preparedWeights.set(name, prepared);
        if (fingerprint !== undefined) shared.set(fingerprint, prepared);
      }
    }
    return this.preparedWeights.get(name);
  }

  async transform(name) {
    const transform = this.plan.functions[name + TRANSFORM_SUFFIX];
    // The transform takes every weight as stored (its num_input is 0), bound once.
    const names = transform.slots.filter((s) => s.kind === "weight").map((s) => s.name);
    const missing = names.filter((weight) => !this.weights.has(weight));
    if (missing.length) {
      throw new WebGpuError(`${this.name}: needs weights ${missing.join(", ")}, missing from ` +
                            "its weights file");
    }
    const once = await PlannedFunction.create(
      this.device, transform, (k) => this.pipeline(k), names.map((w) => this.weights.get(w)),
      `${this.name}: ${name}${TRANSFORM_SUFFIX}`);
    const prepared = await once.call([]);
    await this.device.queue.onSubmittedWorkDone();
    once.destroy();
    return prepared;
  }

  /** Makes every function's pipelines and buffers and prepares its weights ahead of its first
   * call (else done then). */
  async prepare() {
    const names = Object.keys(this.plan.functions).filter((f) => !f.endsWith(TRANSFORM_SUFFIX));
    await Promise.all(names.map((name) => this.ready(name)));
  }

  async ready(name) {
    const hasTransform = name + TRANSFORM_SUFFIX in this.plan.functions;
    return this.planned(name, hasTransform ? await this.prepared(name) : []);
  }

  async fitted(name, slots, inputs) {
    const missing = slots.map((slot) => slot.name).filter((input) => !(input in inputs));
    if (missing.length) {
      throw new WebGpuError(`${this.name}: ${name} needs inputs ${missing.join(", ")}`);
    }
    return Promise.all(slots.map((slot) => this.fit(inputs[slot.name], slot)));
  }

  /** An input in its planned shape: a GpuTensor of that shape as it is, else a stored typed
   * array, zero-padded where it is smaller (the token features `align` takes at the largest
   * token bucket: compile/alignment.py). */
  async fit(value, slot) {
    const planned = slot.shape;
    if (value instanceof GpuTensor) {
      if (sameShape(value.shape, planned)) return value;
      value = await value.read();
    }
    const data = value.data ?? value;
    const shape = value.shape ?? planned;
    const where = `${this.name}: input ${slot.name}`;
    if (data.length !== count(shape)) {
      throw new WebGpuError(`${where} has ${data.length} values, not the ${count(shape)} of ` +
                            `its shape [${shape}]`);
    }
    const values = stored(data, slot.storage, where);
    if (sameShape(shape, planned)) return values;
    if (shape.length !== planned.length || shape.some((n, i) => n > planned[i])) {
      throw new WebGpuError(`${where} of shape [${shape}] does not fit its planned shape ` +
                            `[${planned}]`);
    }
    return padTo(values, shape, planned);
  }

  /** Runs function `name` on `inputs` (by name: host tensors or GpuTensors); its outputs left
   * on the device. */
  async onDevice(name, inputs) {
    const fn = await this.ready(name);
    return fn.call(await this.fitted(name, fn.inputs, inputs));
  }

  /** Runs function `name` on `inputs`; its outputs on the host, `{data, shape, dtype}`. */
  async run(name, inputs) {
    const fn = await this.ready(name);
    return fn.call(await this.fitted(name, fn.inputs, inputs), true);
  }
}

const sameShape = (a, b) => a.length === b.length && a.every((n, i) => n === b[i]);

/** `values` of `shape` in a zero array of the larger `planned` shape, at its origin. */
function padTo(values, shape, planned) {
  const out = new values.constructor(count(planned));
  const row = shape[shape.length - 1];
  if (row === 0) return out;
  const rows = count(shape) / row;
  for (let r = 0; r < rows; r++) {
    let rest = r;
    let offset = 0;
    let stride = planned[planned.length - 1];
    for (let d = shape.length - 2; d >= 0; d--) {
      offset += (rest % shape[d]) * stride;
      rest = Math.floor(rest / shape[d]);
      stride *= planned[d];
    }
    out.set(values.subarray(r * row, (r + 1) * row), offset);
  }
  return out;
}
