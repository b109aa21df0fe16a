# Validate: see kokoro_tvm.stages.validate.validate.


rule validate:
    input:
        library=library_file,
        params=rules.params.output.npz,
        reference=reference_if_runnable,
        code=component_code("validate.py"),
        script=script("validate.py"),
    output:
        report=paths.VALIDATION,
    params:
        options=target_options_of,
        reference=lambda wildcards, input: f"--reference {input.reference}" if input.reference else "",
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
        " --library {input.library} --params {input.params} {params.reference}"
        " --target-options '{params.options}'"
        " --out {output.report} > {log} 2>&1"
