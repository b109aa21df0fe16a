# Reference: see kokoro_tvm.stages.reference.reference.


rule reference:
    input:
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=component_code("reference.py"),
        script=script("reference.py"),
    output:
        npz=paths.REFERENCE,
    params:
        seed=setting("validation.seed"),
        versions=versions("torch", "kokoro"),
    priority: longest_chains_first
    log:
        "logs/reference/{component}/b{bucket}.log",
    benchmark:
        "benchmarks/reference/{component}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --bucket {wildcards.bucket} --seed {params.seed}"
        " --out {output.npz} > {log} 2>&1"
