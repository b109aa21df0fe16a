# Params: see kokoro_tvm.stages.params.write_params.


rule params:
    input:
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=code_inputs("params.py"),
        script=script("params.py"),
    output:
        npz=paths.PARAMS,
    params:
        versions=versions("torch", "kokoro"),
    log:
        "logs/params/{component}.log",
    benchmark:
        "benchmarks/params/{component}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --out {output.npz} > {log} 2>&1"
