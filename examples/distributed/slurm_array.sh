#!/usr/bin/env bash
# One ablate study on a Slurm cluster: each task of this job array is one `ablate worker` (one machine's
# share of the study), all pointed at one PostgreSQL study store and one MLflow tracking server.
# docs/distributed.md sets those two up and explains what happens when a node dies.
#
#   export ABLATE_STORAGE=postgresql://ablate:secret@db-host:5432/ablate
#   export MLFLOW_TRACKING_URI=http://mlflow-host:5000
#   sbatch --array=0-7 examples/distributed/slurm_array.sh studies/quickstart.yaml default   # 8 workers
#   sbatch --dependency=afterany:<JOBID> --wrap ".venv/bin/ablate report studies/quickstart.yaml --budget default"
#
# Run it from the repository's checkout (the job starts in the folder it was submitted from), with
# ablate installed in .venv/ there (`pip install -e '.[postgres]'`). sbatch passes the submitting
# shell's environment (ABLATE_STORAGE, MLFLOW_TRACKING_URI) to every task.
#
#SBATCH --job-name=ablate-worker
#SBATCH --array=0-3                       # N workers (one per array task); --array on the command line overrides it
#SBATCH --cpus-per-task=4                 # torch threads of each worker (--threads below)
#SBATCH --mem=8G                          # the zoo models need little; SmolLM2 on CPU about 4 GB
#SBATCH --time=04:00:00                   # a worker killed at its limit leaves its trial to be retried (docs/distributed.md)
#SBATCH --requeue                         # a task whose node fails may be started again (the worker resumes the study)
#SBATCH --output=ablate-worker-%A_%a.log  # one log per task: the trials it ran, then "worker done: ..."

set -euo pipefail

study=${1:-studies/quickstart.yaml}       # the study file: the same file on every machine (its design is checked)
budget=${2:-default}                      # the budget to run
: "${ABLATE_STORAGE:?set ABLATE_STORAGE=postgresql://user:password@host:5432/database (the shared study store)}"
: "${MLFLOW_TRACKING_URI:?set MLFLOW_TRACKING_URI=http://mlflow-host:5000 (the shared MLflow server)}"

cd "${SLURM_SUBMIT_DIR:-.}"
if [ -f .venv/bin/activate ]; then
    source .venv/bin/activate
fi

threads=${SLURM_CPUS_PER_TASK:-1}
export OMP_NUM_THREADS=$threads           # OpenMP and MKL pools of this task: its CPUs only
export MKL_NUM_THREADS=$threads

# runs/ (each trial's checkpoints) is under the submit folder: on a filesystem the nodes share, a trial
# retried on another node resumes from the dead worker's last checkpoint instead of starting over.
exec ablate worker "$study" --budget "$budget" --threads "$threads" --runs runs
