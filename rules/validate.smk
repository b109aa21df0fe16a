# Validate: see kokoro_tvm.stages.validate.validate.


rule validate:
    input:
        library=rules.build.output.library,
        params=rules.params.output.npz,
        reference=rules.reference.output.npz,
        code=component_code("validate.py"),
        script=script("validate.py"),
    output:
        report=paths.VALIDATION,
    params:
        options=target_options_of,
    threads: validation_threads
    priority: longest_chains_first
    log:
        "logs/validate/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/validate/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "TVM_NUM_THREADS={threads} python {input.script}"
        " --component {wildcards.component} --lstm {wildcards.lstm} --bucket {wildcards.bucket}"
        " --library {input.library} --params {input.params} --reference {input.reference}"
        " --target-options '{params.options}'"
        " --out {output.report} > {log} 2>&1"
