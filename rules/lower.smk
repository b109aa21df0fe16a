# Lower: see kokoro_tvm.stages.lower.lower.


rule lower:
    input:
        relax=rules.relax.output.relax,
        code=component_code("lower.py"),
        tuning=tuning_database,
        script=script("lower.py"),
    output:
        lowered=paths.LOWERED,
    params:
        options=target_options_of,
        tuning=lambda wildcards, input: f"--tuning-db {input.tuning}" if input.tuning else "",
        precision=library_precision_of,
        versions=versions("apache-tvm"),
    priority: longest_chains_first
    log:
        "logs/lowered/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/lowered/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --relax {input.relax} --bucket {wildcards.bucket}"
        " --target-options '{params.options}'"
        " --precision {params.precision} --out {output.lowered} {params.tuning} > {log} 2>&1"
