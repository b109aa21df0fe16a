// What the module's Node tests share.

/** A plan of one function that adds its input to a weight its transform copies. */
export function tinyPlan() {
  const kernel = (bindings) => ({
    wgsl: "", scalars: [], workgroup: [64, 1, 1], workgroup_bytes: 0,
    bindings: bindings.map((access, binding) => ({ access, binding, type: "f32" })),
  });
  return {
    format: "kokoro-tvm-webgpu-plan", version: 1, target: {},
    kernels: { add: kernel(["read", "read", "read_write"]), copy: kernel(["read", "read_write"]) },
    functions: {
      main: {
        num_input: 1,
        slots: [
          { kind: "input", name: "x", shape: [1, 2, 4], dtype: "float32", storage: "float32", slot: 0 },
          { kind: "weight", name: "w", shape: [4], dtype: "float32", storage: "float32", slot: 1 },
          { kind: "storage", bytes: 32, slot: 2 },
        ],
        dispatches: [{ kernel: "add", bindings: [0, 1, 2], grid: [1, 1, 1], uniform: [1] }],
        outputs: [{ slot: 2, shape: [1, 2, 4], dtype: "float32", storage: "float32" }],
      },
      main_transform_params: {
        num_input: 0,
        slots: [
          { kind: "weight", name: "layer.weight", shape: [4], dtype: "float32", storage: "float32", slot: 0 },
          { kind: "storage", bytes: 16, slot: 1 },
        ],
        dispatches: [{ kernel: "copy", bindings: [0, 1], grid: [1, 1, 1], uniform: [1] }],
        outputs: [{ slot: 1, shape: [4], dtype: "float32", storage: "float32" }],
      },
    },
  };
}
