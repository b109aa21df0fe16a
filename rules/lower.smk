# Lower: the target's Relax pipeline, up to code generation.


rule lower:
    input:
        relax=rules.import_relax.output.relax,
        code=lower_code,
        stage=package_files("stages/lower.py"),
        schedules=package_folder("compile/schedules"),
        tuning=tuning_database,
        script=script("lower.py"),
    output:
        lowered=paths.LOWERED,
    params:
        options=lambda wildcards: target_options(wildcards.target),
        tuning=lambda wildcards, input: f"--tuning-db {input.tuning}" if input.tuning else "",
        versions=versions("apache-tvm"),
    log:
        "logs/lowered/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/lowered/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --relax {input.relax} --target-options '{params.options}'"
        " --out {output.lowered} {params.tuning} > {log} 2>&1"


rule tune:
    input:
        relax=rules.import_relax.output.relax,
        code=lower_code,
        stage=package_files("compile/tune.py", "stages/tune.py"),
        schedules=package_folder("compile/schedules"),
        script=script("tune.py"),
    output:
        database=directory(paths.TUNING),
    params:
        options=lambda wildcards: target_options(wildcards.target),
        max_trials=setting("tuning.max_trials"),
        trials_per_task=setting("tuning.trials_per_task"),
        versions=versions("apache-tvm"),
    threads: target_threads
    log:
        "logs/tuning/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/tuning/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --relax {input.relax} --target-options '{params.options}'"
        " --max-trials {params.max_trials} --trials-per-task {params.trials_per_task}"
        " --out {output.database} > {log} 2>&1"
