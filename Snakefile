# kokoro-tvm: Kokoro-82M compiled with Apache TVM, one native library per
# (component, target, bucket, lstm-method). See README.md and DESIGN.md section 2 for the layout.

# Defaults beside this file; --configfile and --config override them key by key.
configfile: f"{workflow.basedir}/config.yaml"


include: "rules/common.smk"
include: "rules/assets.smk"


rule all:
    default_target: True
    input:
        all_targets(),
