# Image: see kokoro_tvm.stages.image (describe_base, build_image).


# The base first: one that cannot be had (no registry reachable, no such image) stops the run
# in one line on the terminal (stderr is not in the log) before any library is built.
rule image_base:
    input:
        code=code_inputs("image_base.py"),
        script=script("image_base.py"),
    output:
        description=paths.IMAGE_BASE,
    params:
        base=setting("image.base"),
        builder=setting("image.builder"),
    priority: 1_000_000  # above every library job's (longest_chains_first: their buckets)
    log:
        "logs/image/base.log",
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --base {params.base:q} --builder {params.builder}"
        " --out {output.description} > {log}"


rule image_target:
    input:
        folder=rules.dist.output.folder,
        base=rules.image_base.output.description,
        containerfile=f"{workflow.basedir}/deploy/Containerfile",
        pyproject=f"{workflow.basedir}/pyproject.toml",
        runtime=runtime_code(),
        code=code_inputs("image.py"),
        script=script("image.py"),
    output:
        archive=paths.IMAGE,
    params:
        source=lambda wildcards, input: os.path.dirname(input.pyproject),
        name=setting("image.name"),
    log:
        "logs/image/{target}.log",
    benchmark:
        "benchmarks/image/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --folder {input.folder} --base {input.base}"
        " --containerfile {input.containerfile} --source {params.source:q}"
        " --name {params.name} --out {output.archive} > {log} 2>&1"
