# Export: see kokoro_tvm.stages.export.export.


rule export:
    input:
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=component_code("export.py"),
        script=script("export.py"),
    output:
        pt2=paths.EXPORT,
    params:
        versions=versions("torch", "kokoro"),
    priority: longest_chains_first
    log:
        "logs/export/{component}.log",
    benchmark:
        "benchmarks/export/{component}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --out {output.pt2} > {log} 2>&1"
