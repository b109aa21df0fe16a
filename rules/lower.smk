# Lower: the target's Relax pipeline, up to code generation.


rule lower:
    input:
        relax=rules.import_relax.output.relax,
        code=package_files("compile/lower.py", "compile/targets.py", "abi.py", "stages.py"),
        schedules=package_folder("compile/schedules"),
        script=script("lower.py"),
    output:
        lowered=paths.LOWERED,
    params:
        options=lambda wildcards: target_options(wildcards.target),
        versions=versions("apache-tvm"),
    log:
        "logs/lowered/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/lowered/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --relax {input.relax} --target-options '{params.options}'"
        " --out {output.lowered} > {log} 2>&1"
