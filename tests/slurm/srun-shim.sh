#!/bin/sh
# srun for the test cluster: snakemake-executor-plugin-slurm-jobstep drops every SLURM_*
# variable (SLURM_CONF included) before its inner srun, which then looks for
# /etc/slurm/slurm.conf. Restore the test cluster's config and hand over to the real srun.
if [ -n "$KOKORO_TEST_SLURM_CONF" ]; then
    SLURM_CONF="$KOKORO_TEST_SLURM_CONF"
    export SLURM_CONF
fi
exec /usr/bin/srun "$@"
