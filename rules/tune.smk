# Tune: see kokoro_tvm.stages.tune.tune.


rule tune:
    input:
        relax=rules.relax.output.relax,
        code=component_code("tune.py"),
        script=script("tune.py"),
    output:
        database=directory(paths.TUNE),
    params:
        options=target_options_of,
        max_trials=setting("tuning.max_trials"),
        trials_per_task=setting("tuning.trials_per_task"),
        versions=versions("apache-tvm"),
    threads: job_threads
    log:
        "logs/tune/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/tune/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --relax {input.relax} --bucket {wildcards.bucket}"
        " --target-options '{params.options}'"
        " --max-trials {params.max_trials} --trials-per-task {params.trials_per_task}"
        " --threads {threads} --out {output.database} > {log} 2>&1"
