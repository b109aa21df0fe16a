# Build: see kokoro_tvm.stages.build.build.


rule build:
    wildcard_constraints:
        target=targets_pattern(webgpu=False),
    input:
        lowered=rules.lower.output.lowered,
        params=rules.params.output.npz,
        code=component_code("build.py"),
        script=script("build.py"),
    output:
        library=paths.LIBRARY,
        meta=paths.LIBRARY_META,
    params:
        options=target_options_of,
        versions=versions("apache-tvm"),
    priority: longest_chains_first
    log:
        "logs/lib/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/lib/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --lowered {input.lowered} --params {input.params}"
        " --target {wildcards.target} --target-options '{params.options}'"
        " --component {wildcards.component} --lstm {wildcards.lstm} --bucket {wildcards.bucket}"
        " --out {output.library} --out-meta {output.meta} > {log} 2>&1"


# WebGPU's libraries: WGSL and launch plans in one JSON document, no host code to link.
rule build_webgpu:
    wildcard_constraints:
        target=targets_pattern(webgpu=True),
    input:
        lowered=rules.lower.output.lowered,
        params=rules.params.output.npz,
        code=component_code("build.py"),
        script=script("build.py"),
    output:
        library=paths.PLAN,
        meta=paths.LIBRARY_META,
    params:
        options=target_options_of,
        versions=versions("apache-tvm"),
    priority: longest_chains_first
    log:
        "logs/lib/{target}/{component}/{lstm}/b{bucket}.log",
    benchmark:
        "benchmarks/lib/{target}/{component}/{lstm}/b{bucket}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --lowered {input.lowered} --params {input.params}"
        " --target {wildcards.target} --target-options '{params.options}'"
        " --component {wildcards.component} --lstm {wildcards.lstm} --bucket {wildcards.bucket}"
        " --out {output.library} --out-meta {output.meta} > {log} 2>&1"
