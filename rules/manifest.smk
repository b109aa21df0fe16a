# Manifest: see kokoro_tvm.stages.manifest.manifest.


rule manifest:
    input:
        metas=lambda wildcards: per_library(paths.LIBRARY_META, wildcards.target),
        validations=lambda wildcards: per_library(paths.VALIDATION, wildcards.target),
        code=code_inputs("manifest.py"),
        script=script("manifest.py"),
    output:
        manifest=paths.MANIFEST,
    log:
        "logs/manifest/{target}.log",
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --target {wildcards.target} --metas {input.metas}"
        " --validations {input.validations} --out {output.manifest} > {log} 2>&1"
