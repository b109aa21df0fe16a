# kokoro-tvm: Kokoro-82M compiled with Apache TVM, one native library per
# (component, target, bucket, lstm-method). Artifact layout: kokoro_tvm/paths.py.

# Defaults beside this file; --configfile and --config override them key by key.
configfile: f"{workflow.basedir}/config.yaml"


include: "rules/common.smk"
include: "rules/assets.smk"
include: "rules/export.smk"
include: "rules/params.smk"
include: "rules/relax.smk"
include: "rules/tune.smk"
include: "rules/lower.smk"
include: "rules/build.smk"
include: "rules/validate.smk"
include: "rules/manifest.smk"
include: "rules/dist.smk"
include: "rules/bench.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(),


# Benchmarks: not part of `all`; `snakemake bench_lstm` (or bench_components, bench_e2e) builds what they
# need and times it.
rule bench_lstm:
    input:
        bench_lstm_targets(),


rule bench_components:
    input:
        bench_components_targets(),


rule bench_e2e:
    input:
        bench_e2e_targets(),


# Everything `snakemake --report report.html all figures` shows beyond validation.
rule figures:
    input:
        figure_targets(),
