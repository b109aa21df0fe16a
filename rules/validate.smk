# Validate: every library against PyTorch; the manifest lists the validated libraries per target.


rule validate:
    input:
        library=rules.build.output.library,
        params=rules.params.output.npz,
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=package_files("validate.py", "components.py", "packed_lstm.py", "masked_norm.py",
                           "stages/common.py", "stages/validate.py",
                           "compile/devices.py", "compile/gpu.py", "library.py", "abi.py"),
        script=script("validate.py"),
    output:
        report=paths.VALIDATION,
    params:
        seed=setting("validation.seed"),
        options=lambda wildcards: target_options(wildcards.target),
    log:
        "logs/validate/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/validate/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --bucket {wildcards.bucket}"
        " --library {input.library} --params {input.params} --seed {params.seed}"
        " --target-options '{params.options}'"
        " --out {output.report} > {log} 2>&1"


rule manifest:
    input:
        metas=lambda wildcards: per_library(paths.LIBRARY_META, wildcards.target),
        validations=lambda wildcards: per_library(paths.VALIDATION, wildcards.target),
        code=package_files("stages/common.py", "stages/manifest.py"),
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
