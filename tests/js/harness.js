// The browser test's page script (tests/test_web.py): plays a component's calls through the
// module as a page would (loader, WebGPU device, player) and hands the outputs back. A tensor
// crosses to and from Python as {b64, dtype, shape}: its bytes in base64, row-major.
import { loadModel } from "/js/loader.js";
import { GpuTensor, WebGpuDevice } from "/js/player.js";

const ARRAYS = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array, bool: Uint8Array };

function decoded({ b64, dtype, shape }) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return { data: new ARRAYS[dtype](bytes.buffer), shape, dtype };
}

function encoded({ data, shape, dtype }) {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return { b64: btoa(text), dtype, shape };
}

let device = null;

/** The adapter's one line. */
export async function adapter() {
  device ??= await WebGpuDevice.request();
  return device.describe();
}

/** Runs `calls` ({fn, inputs, onDevice}) on `component`'s library at `bucket` of the model at
 * `url`: an input is a tensor or {output: [call, index]}, an earlier call's output (left on the
 * device where that call was `onDevice`). Returns every call's outputs and the times taken. */
export async function play(url, component, bucket, calls) {
  const started = performance.now();
  device ??= await WebGpuDevice.request();
  const model = await loadModel(url);
  const library = await model.open(device, component, bucket);
  const opened = performance.now();
  await library.prepare();
  const prepared = performance.now();
  const outputs = [];
  for (const call of calls) {
    const inputs = Object.fromEntries(Object.entries(call.inputs).map(([name, value]) => [
      name, value.output ? outputs[value.output[0]][value.output[1]] : decoded(value)]));
    outputs.push(await (call.onDevice ? library.onDevice(call.fn, inputs)
                                      : library.run(call.fn, inputs)));
  }
  const ran = performance.now();
  const host = await Promise.all(outputs.map((tensors) => Promise.all(tensors.map(
    (tensor) => (tensor instanceof GpuTensor ? tensor.read() : tensor)))));
  return {
    outputs: host.map((tensors) => tensors.map(encoded)),
    seconds: { load: (opened - started) / 1000, prepare: (prepared - opened) / 1000,
               calls: (ran - prepared) / 1000 },
  };
}

/** What loading `path` of the model at `url` says: "ok", or its error's message. */
export async function load(url, path) {
  const model = await loadModel(url);
  try {
    await model.file(path);
    return "ok";
  } catch (error) {
    return error.message;
  }
}
