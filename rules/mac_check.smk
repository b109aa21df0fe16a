# Mac check: see kokoro_tvm.stages.mac_check.mac_check_bundle.


rule mac_check_bundle:
    input:
        libraries=lambda wildcards: mac_check_libraries(),
        metas=lambda wildcards: mac_check_libraries(paths.LIBRARY_META),
        params=expand(paths.PARAMS, component=COMPONENTS),
        config=rules.weights.output.config,
        voice=paths.ASSET_VOICE.format(voice=setting("report.voice")),
        pyproject=f"{workflow.basedir}/pyproject.toml",
        runtime=runtime_code(),
        code=code_inputs("mac_check.py"),
        script=script("mac_check.py"),
    output:
        bundle=directory(paths.MAC_CHECK),
    params:
        source=lambda wildcards, input: os.path.dirname(input.pyproject),
        seed=setting("mac_check.seed"),
    log:
        "logs/mac_check.log",
    benchmark:
        "benchmarks/mac_check.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --libraries {input.libraries} --metas {input.metas}"
        " --params {input.params} --model-config {input.config} --voice {input.voice}"
        " --source {params.source:q} --seed {params.seed} --out {output.bundle} > {log} 2>&1"
