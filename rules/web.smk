# Web: see kokoro_tvm.stages.web.write_web. `snakemake web` (docs/browser.md): not part of `all`,
# since it needs the webgpu target's folder.


rule web:
    input:
        folder=paths.DIST.format(target=web_target()),
        module=web_module(),
        code=code_inputs("web.py"),
        script=script("web.py"),
    output:
        site=directory(paths.WEB),
    log:
        "logs/web.log",
    benchmark:
        "benchmarks/web.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --folder {input.folder} --out {output.site} > {log} 2>&1"
