# kokoro-tvm: Kokoro-82M compiled with Apache TVM, one native library per
# (component, target, bucket, lstm-method). See README.md and DESIGN.md section 2 for the layout.

configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/assets.smk"


rule all:
    default_target: True
    input:
        all_targets(),
