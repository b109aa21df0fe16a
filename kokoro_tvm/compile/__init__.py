"""From torch.export programs to TVM libraries: import -> specialize -> lower -> build.

- ``relax.import_programs``: ExportedPrograms -> Relax IRModule (one function each) and the
  weights as a separate name -> array dict (kept as function inputs, never embedded); the
  length stays symbolic.
- ``specialize.specialize``: the module at one bucket, its length bound and our ops emitted.
- ``lower.lower``: the target's Relax pipeline, stopping before codegen (saveable as JSON).
- ``build.build_library``: codegen + link of a lowered module into a code-only ``.so``.
- ``converters.CONVERTERS``: fixes to TVM's PyTorch op converters; ``lstm.LSTM_METHODS``: how
  LSTMs are lowered; ``targets.make_target``: targets from their dict form.
"""
