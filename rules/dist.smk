# Dist: see kokoro_tvm.stages.dist.write_dist.


rule dist:
    input:
        manifest=rules.manifest.output.manifest,
        params=expand(paths.PARAMS, component=COMPONENTS),
        config=rules.weights.output.config,
        voices=voice_files(),
        code=code_inputs("dist.py"),
        script=script("dist.py"),
    output:
        folder=directory(paths.DIST),
    log:
        "logs/dist/{target}.log",
    benchmark:
        "benchmarks/dist/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --manifest {input.manifest} --model-config {input.config}"
        " --voices {input.voices} --out {output.folder} > {log} 2>&1"
