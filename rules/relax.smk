# Relax: see kokoro_tvm.stages.relax.relax.


rule relax:
    input:
        pt2=rules.export.output.pt2,
        code=component_code("relax.py"),
        script=script("relax.py"),
    output:
        relax=paths.RELAX,
    params:
        versions=versions("apache-tvm", "torch"),
    priority: longest_chains_first
    log:
        "logs/relax/{component}/{lstm}.log",
    benchmark:
        "benchmarks/relax/{component}/{lstm}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --exported {input.pt2} --lstm {wildcards.lstm}"
        " --out {output.relax} > {log} 2>&1"
