# Export: see kokoro_tvm.stages.export.export.


rule export:
    input:
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=component_code("export.py"),
        script=script("export.py"),
    output:
        pt2=paths.EXPORT,
        reference=paths.EXPORT_REFERENCE,
    params:
        seed=setting("validation.seed"),
        versions=versions("torch", "kokoro"),
    priority: longest_chains_first
    log:
        "logs/export/{component}/b{bucket}.log",
    benchmark:
        "benchmarks/export/{component}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --bucket {wildcards.bucket} --seed {params.seed}"
        " --out {output.pt2} --out-reference {output.reference} > {log} 2>&1"
