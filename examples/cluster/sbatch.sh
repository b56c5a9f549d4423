#!/bin/bash
# A whole RL run (`seer run`) across Slurm nodes: one `seer actor` per Slurm task, found
# through a registry on the shared filesystem; the driver (`seer run`) runs in the batch
# script itself and stops every actor on exit.
#   sbatch examples/cluster/sbatch.sh            (edit the paths first)
#SBATCH --job-name=seer-rl
#SBATCH --ntasks=8                # splitter, estimator, scheduler, 2 generators, draft store,
#SBATCH --nodes=4                 #   2 trainer ranks
#SBATCH --time=04:00:00
set -euo pipefail
SHARED=/shared/$USER/seer                     # a folder every node sees (NFS, Lustre)
KEYS=$SHARED/keys                             # `seer keys $KEYS` once; mode 0700
RUN=$SHARED/run-$SLURM_JOB_ID.toml            # the RunConfig (mode static, this run id)
ACTORS=$SHARED/actors-$SLURM_JOB_ID.toml      # the topology every task's `seer actor` runs
REGISTRY=$SHARED/registry

# the run: tcp + CURVE, the registry, the warm start cached where every node reads it
python examples/cluster/make_config.py --rl --keys "$KEYS" --run-id "job$SLURM_JOB_ID" \
    --registry "$REGISTRY" --cache-dir "$SHARED/cache" > "$RUN"
# the actors' topology (the warm start runs here once, into the shared cache)
seer run --config "$RUN" --write-actors-config "$ACTORS"

# SLURM_PROCID picks each task's actor: the rank-th of the topology, in order. A node
# without a default route must name its address: add `--host <its address>`.
srun --ntasks=8 --kill-on-bad-exit=1 \
    seer actor --config "$ACTORS" --registry "$REGISTRY" &

# the driver: the RL loop itself, attached through the same registry; the trainer ranks
# meet at rank 0's node (its address from the registry, port trainer.dist_port)
seer run --config "$RUN" --out "$SHARED/run-$SLURM_JOB_ID"
wait
