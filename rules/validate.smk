# Validate: every library against PyTorch on the same inputs, and at exact length.


rule validate:
    input:
        library=rules.build.output.library,
        params=rules.params.output.npz,
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=component_code("validate.py"),
        script=script("validate.py"),
    output:
        report=paths.VALIDATION,
    params:
        seed=setting("validation.seed"),
        options=lambda wildcards: target_options(wildcards.target),
    threads: job_threads
    log:
        "logs/validate/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/validate/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "TVM_NUM_THREADS={threads} python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --lstm {wildcards.lstm} --bucket {wildcards.bucket}"
        " --library {input.library} --params {input.params} --seed {params.seed}"
        " --target-options '{params.options}' --threads {threads}"
        " --out {output.report} > {log} 2>&1"
