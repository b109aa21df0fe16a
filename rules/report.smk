# Report: figures for `snakemake --report report.html` (the validation table is part of `all`;
# the spectrogram comparison and the benchmark plots come with `snakemake figures`).


# See kokoro_tvm.measure.validation_report.
rule validation_report:
    input:
        validations=lambda wildcards: per_library(paths.VALIDATION, wildcards.target),
        code=code_inputs("validation_report.py"),
        script=script("validation_report.py"),
    output:
        report(paths.REPORT_VALIDATION, category="Validation", labels={"target": "{target}"}),
    log:
        "logs/report/validation/{target}.log",
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --target {wildcards.target} --validations {input.validations}"
        " --out {output} > {log} 2>&1"


# See kokoro_tvm.measure.spectrogram.
rule spectrogram:
    input:
        model=rules.dist.output.folder,
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        voice=expand(paths.ASSET_VOICE, voice=setting("report.voice")),
        code=code_inputs("spectrogram.py"),
        script=script("spectrogram.py"),
    output:
        report(paths.REPORT_SPECTROGRAM, category="Audio", labels={"target": "{target}"}),
    params:
        sentence=setting("report.sentence"),
        voice=setting("report.voice"),
    threads: job_threads
    log:
        "logs/report/spectrogram/{target}.log",
    benchmark:
        "benchmarks/report/spectrogram/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "TVM_NUM_THREADS={threads} python {input.script} --target {wildcards.target}"
        " --sentence {params.sentence:q} --voice {params.voice} --out {output} > {log} 2>&1"
