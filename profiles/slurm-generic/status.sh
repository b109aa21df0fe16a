#!/bin/sh
# Job status for snakemake-executor-plugin-cluster-generic: prints running, success or failed.
# Usage: status.sh JOBID   (JOBID as printed by `sbatch --parsable`, possibly "id;cluster")
#
# squeue first: it works without an accounting database (slurmdbd), and `squeue -t all` still
# lists a finished job for MinJobAge seconds (300 by default) after it ends. When squeue no
# longer knows the job ("Invalid job id"), sacct is asked; if neither knows it, the job is
# reported failed, so that Snakemake reruns it rather than trust outputs it cannot vouch for.
# Any other squeue error (slurmctld busy or restarting) reports running: ask again later.
id=${1%%;*}

if out=$(squeue --noheader --states=all --jobs="$id" --format=%T 2>&1); then
    state=$(printf '%s\n' "$out" | head -n 1)
elif printf '%s' "$out" | grep -q 'Invalid job id'; then
    state=$(sacct --noheader --parsable2 --allocations --jobs="$id" --format=State 2>/dev/null \
            | head -n 1 | cut -d' ' -f1)
else
    echo running
    exit 0
fi

case "$state" in
    COMPLETED)
        echo success ;;
    PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED|REQUEUED|REQUEUE_FED|REQUEUE_HOLD|RESIZING|SIGNALING|STAGE_OUT|STOPPED|RESV_DEL_HOLD)
        echo running ;;
    *)
        # FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE,
        # or a job neither squeue nor sacct knows.
        echo failed ;;
esac
