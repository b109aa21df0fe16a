# kokoro-tvm: Kokoro-82M compiled with Apache TVM, one native library per
# (component, target, bucket, lstm-method). Artifact layout: kokoro_tvm/paths.py.

# Defaults beside this file; --configfile and --config override them key by key.
configfile: f"{workflow.basedir}/config.yaml"


include: "rules/common.smk"
include: "rules/assets.smk"
include: "rules/export.smk"
include: "rules/reference.smk"
include: "rules/params.smk"
include: "rules/relax.smk"
include: "rules/tune.smk"
include: "rules/lower.smk"
include: "rules/build.smk"
include: "rules/validate.smk"
include: "rules/manifest.smk"
include: "rules/dist.smk"
include: "rules/image.smk"
include: "rules/mac_check.smk"
include: "rules/web.smk"
include: "rules/bench.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(),


# The server's container image of each image.targets folder (docs/deploying.md, Containers):
# not part of `all`, since it needs a container engine.
rule image:
    input:
        expand(paths.IMAGE, target=setting("image.targets")),


# The Mac check's bundle (docs/other-targets.md, Macs): not part of `all`; a Mac owner runs it.
rule mac_check:
    input:
        paths.MAC_CHECK,


# Benchmarks: not part of `all`; `snakemake bench_lstm` (or bench_components, bench_e2e, bench_serve,
# bench_slow_readers, and bench_web, rules/bench.smk: the browser beside kokoro-js) builds what
# they need and times it.
rule bench_lstm:
    input:
        per_runnable_target(paths.BENCH_LSTM),


rule bench_components:
    input:
        per_runnable_target(paths.BENCH_COMPONENTS),


rule bench_e2e:
    input:
        per_runnable_target(paths.BENCH_E2E),


rule bench_serve:
    input:
        per_runnable_target(paths.BENCH_SERVE),


rule bench_slow_readers:
    input:
        per_runnable_target(paths.BENCH_SLOW_READERS),


# Everything `snakemake --report report.html all figures` shows beyond validation.
rule figures:
    input:
        per_runnable_target(paths.REPORT_SPECTROGRAM, paths.BENCH_COMPONENTS, paths.BENCH_E2E,
                            paths.BENCH_LSTM),
