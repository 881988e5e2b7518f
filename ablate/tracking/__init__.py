"""MLflow tracking of studies: one experiment per study, one parent run per study and budget, one
child run per trial, metrics logged in batches, artifacts a report can read in one go.

This is the only package that imports mlflow. Layout in MLflow::

    experiment <study name>                       tags: ablate.study, mlflow.experimentKind=
                                                    custom_model_development (a model-training
                                                    experiment, see EXPERIMENT_KIND_TAG)
      run "<study> (<budget>)"                      the parent: one per study and budget, found
                                                    again by its tags on every run of the study
        tags    ablate.role=study, ablate.study, ablate.budget, ablate.storage, git commit, versions,
                ablate.command (the command line of the last `ablate run` of the study),
                ablate.git_diff_sha256 (from a dirty checkout: the first 12 hex digits of the
                sha256 of diff.patch)
        params  design, budget, seeds, arms, trials, objective.*
        files   study.yaml (the study file), design.json (arms, levels, trial keys), diff.patch
                (from a dirty checkout: `git diff HEAD` of its tracked files, which `git apply`
                puts back onto the commit)
        run "<arm> seed=<s>"                        a child (tag mlflow.parentRunId): one per trial,
                                                    reused when the trial is retried or resumed
          tags    ablate.role=trial, ablate.trial_key, ablate.arm, ablate.seed, ablate.budget,
                  ablate.study, ablate.worker, ablate.objective, ablate.error (failed), git commit,
                  ablate.git_diff_sha256 (dirty checkout), versions (ablate, torch, transformers,
                  python)
          params  the flattened resolved TrialConfig (``loss.clip_high`` ...) and ``level.<factor>``
          metrics every metric the trainer logs (docs/metrics.md), by step
          files   config.yaml, history.csv (every logged step x metric: one file, so that reports
                  need not fetch metric by metric), eval_problems.csv (every evaluation x eval
                  problem, see below), samples.json (sample completions with their per-component
                  rewards), result.json (final metrics, objective, warm start), diff.patch (as
                  the parent's, from the checkout the trial's run was created in), and
                  errors/attempt-<n>.txt: the error of each failed attempt (n = 1, 2, ...), kept
                  when a retry succeeds, so the run's status (and the ablate.error tag, which a
                  retry removes) says how the trial ended and errors/ how its attempts failed

``eval_problems.csv`` holds one row per evaluation of the trial x eval problem, with the columns
:data:`EVAL_PROBLEM_COLUMNS`: ``step`` (the RL step evaluated after; 0 = the start policy),
``problem`` (the problem's index in the trial's eval problems, ``task.sample("eval", eval.n_problems,
seed=task.data_seed)``: fixed by the task, its difficulty and options and ``task.data_seed``, never by
the trial seed, so index i is the same problem in every seed, and in every arm that leaves those task
settings alone; a smaller ``eval.n_problems`` evaluates a prefix), ``correct`` (final answer right,
0/1), ``step_accuracy`` (correct steps over the reference's steps), ``format_ok`` (0/1), ``length``
(generated tokens, EOS included), ``truncated`` (no EOS within rollout.max_new_tokens, 0/1) and
``partial`` (partial credit). Greedy decoding; the means over problems of one step are that step's ``eval/*`` metrics.
Trials logged before this file existed have none (:mod:`ablate.tracking.results` then gives no rows for them).

The tracking URI is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in
the working directory (MLflow's own default); ``mlflow ui`` (or ``mlflow ui --backend-store-uri
sqlite:///mlflow.db``) shows it all. An ``http://`` URI logs to an ``mlflow server``. A SQLite store is
opened under a lock file beside it (``mlflow.db.lock``): MLflow creates a new store's schema when it opens
it, and two processes doing that at once would race.

Metrics are buffered by :class:`TrialLogger` and sent with ``MlflowClient.log_batch`` every
``flush_every`` steps and at the end, never one request per metric. MLflow metric names allow only
letters, digits and ``_ - . / : space``; other characters are replaced (``eval/pass@8`` is logged as
``eval/pass_at_8``, see :func:`metric_name`).


The package by responsibility: :mod:`~ablate.tracking.names` (tags, URIs, the files a run holds),
:mod:`~ablate.tracking.client` (the client, its retries and the link to a server),
:mod:`~ablate.tracking.logger` (a trial's buffered metrics), :mod:`~ablate.tracking.runs` (parent and trial
runs), :mod:`~ablate.tracking.read` (a study read back) and :mod:`~ablate.tracking.outbox` (trials kept
on disk through an outage, uploaded once later); every public name but the outbox's is importable from here.
"""

from __future__ import annotations

from ablate.tracking.client import (
    HTTP_REQUEST_DEFAULTS,
    PROBE_SECONDS,
    RETRY_SECONDS,
    TRACKING_ERRORS,
    Link,
    LinkedClient,
    TrackingOffline,
    check_tracking_server,
    first_line,
    health_error,
    is_unreachable,
    link_for,
)
from ablate.tracking.logger import (
    TrialLogger,
)
from ablate.tracking.names import (
    DEFAULT_TRACKING_URI,
    DIFF_FILE,
    ENV_TRACKING_URI,
    ERRORS_DIR,
    EVAL_PROBLEM_COLUMNS,
    EVAL_PROBLEMS_FILE,
    EXPERIMENT_KIND_MODEL_TRAINING,
    EXPERIMENT_KIND_TAG,
    LEVEL_PARAM_PREFIX,
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VALUE,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VALUE,
    RUNS_VIEW_QUERY,
    TAG_ARM,
    TAG_BUDGET,
    TAG_COMMAND,
    TAG_ERROR,
    TAG_FINGERPRINT,
    TAG_GIT_DIFF,
    TAG_KEY,
    TAG_LOGGED_STEP,
    TAG_OBJECTIVE,
    TAG_ROLE,
    TAG_SEED,
    TAG_STORAGE,
    TAG_STUDY,
    TAG_STUDY_FILE,
    TAG_WORKER,
    TRUNCATED,
    TrackingError,
    code_diff,
    code_version,
    diff_sha256,
    diff_tags,
    dirty_diff,
    eval_problems_csv,
    experiment_url,
    finite_json,
    git_diff,
    git_tags,
    gpu_tags,
    history_csv,
    machine_tags,
    metric_name,
    missing_local_store,
    param_value,
    resolve_tracking_uri,
    tracking_location,
    trial_params,
    truncate,
)
from ablate.tracking.read import (
    RunRecord,
    log_report,
    read_run_file,
    study_runs,
)
from ablate.tracking.runs import (
    Tracker,
    TrialIdentity,
)

__all__ = [
    "DEFAULT_TRACKING_URI",
    "DIFF_FILE",
    "ENV_TRACKING_URI",
    "ERRORS_DIR",
    "EVAL_PROBLEMS_FILE",
    "EVAL_PROBLEM_COLUMNS",
    "EXPERIMENT_KIND_MODEL_TRAINING",
    "EXPERIMENT_KIND_TAG",
    "HTTP_REQUEST_DEFAULTS",
    "LEVEL_PARAM_PREFIX",
    "Link",
    "LinkedClient",
    "MAX_METRICS_PER_BATCH",
    "MAX_PARAMS_TAGS_PER_BATCH",
    "MAX_PARAM_VALUE",
    "MAX_TAG_VALUE",
    "PROBE_SECONDS",
    "RETRY_SECONDS",
    "RUNS_VIEW_QUERY",
    "RunRecord",
    "TAG_ARM",
    "TAG_BUDGET",
    "TAG_COMMAND",
    "TAG_ERROR",
    "TAG_FINGERPRINT",
    "TAG_GIT_DIFF",
    "TAG_KEY",
    "TAG_LOGGED_STEP",
    "TAG_OBJECTIVE",
    "TAG_ROLE",
    "TAG_SEED",
    "TAG_STORAGE",
    "TAG_STUDY",
    "TAG_STUDY_FILE",
    "TAG_WORKER",
    "TRACKING_ERRORS",
    "TRUNCATED",
    "Tracker",
    "TrackingError",
    "TrackingOffline",
    "TrialIdentity",
    "TrialLogger",
    "check_tracking_server",
    "code_diff",
    "code_version",
    "diff_sha256",
    "diff_tags",
    "dirty_diff",
    "eval_problems_csv",
    "experiment_url",
    "finite_json",
    "first_line",
    "git_diff",
    "git_tags",
    "gpu_tags",
    "health_error",
    "history_csv",
    "is_unreachable",
    "link_for",
    "log_report",
    "machine_tags",
    "metric_name",
    "missing_local_store",
    "param_value",
    "read_run_file",
    "resolve_tracking_uri",
    "study_runs",
    "tracking_location",
    "trial_params",
    "truncate",
]
