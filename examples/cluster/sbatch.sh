#!/bin/bash
# One seer actor per Slurm task, found through a registry on the shared filesystem; the
# driver (a Rollout with mode="static", or your trainer) runs in the batch script itself.
#   sbatch examples/cluster/sbatch.sh            (edit the paths first)
#SBATCH --job-name=seer-rollout
#SBATCH --ntasks=6                # splitter, estimator, scheduler, 2 generators, draft store
#SBATCH --nodes=3
#SBATCH --time=01:00:00
set -euo pipefail
SHARED=/shared/$USER/seer                     # a folder every node sees (NFS, Lustre)
KEYS=$SHARED/keys                             # `seer keys $KEYS` once; mode 0700
CONFIG=$SHARED/run-$SLURM_JOB_ID.toml         # one config for every task (run_id = job id)
REGISTRY=$SHARED/registry

# the topology: examples/cluster/make_config.py writes it (tcp, CURVE keys, this run id)
python examples/cluster/make_config.py --keys "$KEYS" --run-id "job$SLURM_JOB_ID" > "$CONFIG"

# SLURM_PROCID picks each task's actor: the rank-th of the topology, in order
srun --ntasks=6 --kill-on-bad-exit=1 \
    seer actor --config "$CONFIG" --registry "$REGISTRY" &

# the driver attaches through the same registry; on exit it stops every actor
python examples/cluster/drive.py --config "$CONFIG" --registry "$REGISTRY"
wait
