# Import: exported programs into TVM Relax; weights stay inputs and are stored once per component.


rule params:
    input:
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        code=package_files("components.py", "model.py", "stages/common.py", "stages/params.py"),
        script=script("params.py"),
    output:
        npz=paths.PARAMS,
    params:
        versions=versions("torch", "kokoro"),
    log:
        "logs/params/{component}.log",
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --checkpoint {input.checkpoint} --model-config {input.config}"
        " --component {wildcards.component} --out {output.npz} > {log} 2>&1"


rule import_relax:
    input:
        pt2=rules.export.output.pt2,
        code=import_code,
        script=script("import_relax.py"),
    output:
        relax=paths.RELAX,
    params:
        versions=versions("apache-tvm", "torch"),
    log:
        "logs/relax/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/relax/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --exported {input.pt2} --lstm {wildcards.lstm}"
        " --out {output.relax} > {log} 2>&1"
