# Image: see kokoro_tvm.stages.image.build_image.


rule image_target:
    input:
        folder=rules.dist.output.folder,
        containerfile=f"{workflow.basedir}/deploy/Containerfile",
        pyproject=f"{workflow.basedir}/pyproject.toml",
        runtime=runtime_code(),
        code=code_inputs("image.py"),
        script=script("image.py"),
    output:
        archive=paths.IMAGE,
    params:
        source=lambda wildcards, input: os.path.dirname(input.pyproject),
        base=setting("image.base"),
        builder=setting("image.builder"),
        name=setting("image.name"),
    log:
        "logs/image/{target}.log",
    benchmark:
        "benchmarks/image/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --folder {input.folder} --containerfile {input.containerfile}"
        " --source {params.source:q} --base {params.base:q} --builder {params.builder}"
        " --name {params.name} --out {output.archive} > {log} 2>&1"
