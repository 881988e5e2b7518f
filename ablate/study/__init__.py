"""Study files: the YAML schema, its validation, and the expansion of a study into trials.

A study compares *arms* (combinations of factor levels) over paired *seeds* at a named *budget*::

    name: quickstart                 # required; [a-z0-9_-]+; names the MLflow experiment and reports/<name>/
    description: What question this study answers.            # optional string
    plugins: []                      # optional; modules imported (only these) to register extra components
    base: {task.name: addition, model.name: tiny-llama}        # optional; dotted overrides of TrialConfig
    factors:                         # required; at least one factor
      loss_norm:
        description: How per-token losses are averaged.        # optional string
        levels:                      # level name -> dotted overrides ({} = the defaults)
          sequence: {loss.aggregation: seq-mean-token-mean}
          token:    {loss.aggregation: token-mean}
      clip_high: {path: loss.clip_high, values: [0.2, 0.28]}   # shorthand: one path, several values
    design: full                     # optional (default full); a name or {name: ..., option: ...}
    baseline: {loss_norm: sequence, clip_high: 0.2}           # the control arm (required by one_at_a_time)
    exclude: [{loss_norm: token, clip_high: 0.28}]            # optional; combinations not to run
    seeds: 3                         # required; n (seeds 0..n-1), a list of distinct ints, or {min: 4, max: 16}
    extended_after: [2]              # optional; seed counts whose report was read before the seeds were extended
    contexts: [task]                 # optional; factors replicated over rather than compared (task, model, size)
    entry: {learns: 0.05, band: [0.1, 0.9]}   # with contexts: how a context enters (the baseline learns in a pilot)
    budgets: {smoke: {seeds: 1, train.steps: 2}, full: {train.steps: 400}}  # optional; 'default' always exists
    objective: {metric: eval/accuracy, mode: max, summary: last, last_n: 3}   # required
    tune: {params: {optim.lr: {low: 1.0e-5, high: 1.0e-3, log: true}}, trials: 8, budget: smoke, seeds: 1}
    report: {metrics: [response/length_incorrect, response/length_correct]}   # optional
    primary: [loss_norm]             # optional; the contrast(s) the study exists for: factor or factor=level
    min_effect: 0.03                 # optional; the smallest effect worth finding, in the objective's units
    acknowledge: [gspo-token-sum]    # optional; configuration warnings the study runs into on purpose

Keys, one by one:

- ``name``: ``[a-z0-9_-]+``.
- ``description``: a string: the question the study answers.
- ``plugins``: a list of importable module names (installed, or on ``PYTHONPATH``) or of ``.py``
  files relative to the study file's folder (``plugins/brevity.py``). They are imported before
  anything else is checked, so that the components and designs they register can be named in the
  file. Nothing else is ever imported on a study's behalf.
- ``base``: a mapping of dotted TrialConfig paths to values, applied to every trial.
- ``factors``: factor name (``[A-Za-z0-9_-]+``) -> either ``levels: {level name: {overrides}}`` or the
  shorthand ``{path: dotted.path, values: [...]}``, each with an optional ``description``. Shorthand
  level names are the values written as text: ``str(value)``, except ``true``/``false``/``null`` as
  YAML writes them and lists joined by ``+`` (``[final, prm]`` -> ``final+prm``). Level names may
  not contain ``,`` or ``=`` (they make up arm names). Two factors may not set the same path.
- ``design``: ``full`` | ``one_at_a_time`` | ``fractional`` | ``random`` | a plugin's design; as a
  mapping, ``name`` plus the design's options: ``{name: fractional, resolution: 4}`` (3, 4, 5 or
  III, IV, V; default 4), ``{name: random, n: 6, seed: 0}``. See :mod:`ablate.study.designs`.
- ``baseline``: factor -> level (a level name, or the value of a shorthand factor), one for every
  factor. The control arm; may not be excluded.
- ``exclude``: a list of mappings factor -> level. Every arm that matches all the given levels is
  dropped (an entry may name only some factors). Applies to every design.
- ``seeds``: ``n`` (a positive int: seeds 0, 1, ..., n-1) or a list of distinct ints. Every arm runs
  the same seeds, so arms can be compared seed by seed (paired). ``{min: a, max: b}`` (1 <= a <= b)
  makes the seed count adaptive: the study runs seeds 0..a-1 first, and ``ablate run`` adds seeds in
  rounds, up to b, as variance-only sample-size re-estimation asks (see :mod:`ablate.stats.planning`); it
  needs ``min_effect``, the effect the seeds are planned for.
- ``budgets``: budget name (``[a-z0-9_-]+``) -> dotted overrides (e.g. ``train.steps``), chosen with
  ``--budget``; ``default`` always exists (``{}`` unless given). A budget may also set ``seeds: n``
  (an int >= 1, at most the study's seed count; not with adaptive seeds): it then runs only the
  study's first n seeds, e.g. a smoke budget that checks the plumbing with one or two seeds.
- ``objective``: ``metric`` (a metric a trial logs: a name of docs/metrics.md, ``reward/<c>`` for a reward
  component ``c`` (a plugin's included), ``eval/pass_at_<k>``, ``trl/<name>``; checked, with the nearest
  name), ``mode`` (``max`` | ``min``), ``summary``
  (how a trial's metric history becomes one number: ``last`` = mean of the last ``last_n`` logged
  values; ``mean`` / ``max`` / ``min`` over the history; ``auc`` = area under the curve over steps
  divided by the step range), ``last_n`` (int >= 1, default 1; used by ``last``).
- ``tune``: per-arm tuning: ``params`` (dotted path -> ``{low, high, log}``, low < high, ``log``
  false by default and needing low > 0), ``trials`` (int >= 1, per arm), ``budget`` (an existing
  budget, default ``default``), ``seeds`` (as ``seeds``, default 1). A tuned path may not be a factor.
  At ``--budget smoke`` (plumbing only) every arm is tuned with one trial at the smoke budget instead,
  in Optuna studies of their own (``<study>/tune@smoke/<arm>``, see :func:`ablate.running.tuner.tuning_for_budget`).
- ``report``: ``metrics``: logged metric names (docs/metrics.md) that the report also compares level
  by level against the baseline, each summarised per trial as the mean of its last 10% of logged
  values, with the same paired CIs as the objective but no "better" or "worse" (a diagnostic such as
  the length of incorrect completions has no preferred direction).

- ``primary``: a list of contrasts the study exists for, each ``factor`` (every level of it against
  the baseline level) or ``factor=level`` (that level against the baseline level). The report's
  headline; every other contrast is labelled exploratory. Default: every contrast is exploratory.
- ``min_effect``: the smallest difference worth finding, in the objective's units (a fraction for
  eval/accuracy: 0.03 is 3 points), > 0. Equivalence ("no effect as large as min_effect") can only
  be claimed with it, and ``ablate plan`` plans seeds for it.

- ``extended_after``: the seed counts (increasing, from 2 to below the study's ``seeds: n``; fixed seeds
  only) at which a report of the study was read before its seeds were extended. The report then tests
  each contrast as a two-stage design: the seeds up to the last count, then the rest
  (:mod:`ablate.stats.sequential`; docs/statistics.md). Neither the study's identity nor its trial keys change.
- ``contexts``: factor names the study replicates over rather than compares (a task, a model, a model
  size: anything its levels set as dotted overrides). The design runs over the other (compared)
  factors, and every arm it gives runs in every combination of the contexts' levels at the same seeds,
  so each contrast is paired within each context; the report estimates it per context and pools the
  estimates (:mod:`ablate.stats.meta`). Chosen as a top-level list beside ``primary:`` rather than a
  ``role:`` on each factor because it is one decision about the study's question (which factors the
  answer must travel across), read in one place, like ``primary:``. A context may not be primary,
  every factor may not be a context, and the contexts must give at least two combinations.
- ``entry``: with ``contexts:``, the rule by which a context enters, fixed before the run (issue 54): a
  choice can only matter where the baseline learns. ``learns``: the smallest gain of the baseline over
  its own step-0 objective that a pilot of at least 3 seeds showed (its 95% paired interval above 0) for
  each context listed; ``band``: ``[low, high]``, where the baseline's mean step-0 objective must lie in
  the study's own trials: a context outside it is dropped when the report is made, never pooled, and the
  report lists it; ``pilot``: where the pilot's figures are. A study with contexts and no rule gets a
  warning from ``ablate validate`` and a sentence at the top of its report.
- ``acknowledge``: a list of configuration-warning names (``ablate.config.WARNING_RULES``; every
  warning ends with its name in brackets, e.g. ``[gspo-token-sum]``; docs/config.md lists them) that
  the study crosses on purpose, such as GSPO's sequence ratio under token-mean in a loss-normalization
  x ratio-level study. Validation then prints one line naming what is acknowledged and for which arms
  instead of a warning per arm, and the report says it once. A name that no arm triggers at any
  budget is an error (the acknowledgment would be stale); warnings not listed still print.

A study's identity (:meth:`Study.fingerprint`, which binds its store and MLflow experiment; another file of
the same ``name:`` is refused) is its ``base``, its factors' names and its ``design``, and the ``objective`` of
a study with ``tune:`` (its tuning picks the trials by it). The analysis is not in it: a file that changes only
``objective``, ``min_effect``, ``primary``, ``report``, ``entry`` or ``extended_after`` is the same study, its finished
trials are reused (no trial key depends on them) and its report is rebuilt.

Precedence when a trial's configuration is built: TrialConfig defaults < ``base`` < the context factors'
levels < the budget's overrides < the compared factors' levels (each in factor order) < the trial's seed (path ``seed``, which only
``seeds:`` may set). Every arm's configuration is built, for every budget, when the file is
loaded: a bad level fails :func:`load_study`, never a running study.

:func:`load_study` checks everything and raises one :class:`StudyError` listing every problem as
``FILE:LINE: key: problem; allowed ...; did you mean ...?``: the study's own (a baseline, a design, a metric)
and every key of ``base``, the budgets and the levels checked on its own, in one pass; what only a combination
of keys gets wrong is checked on the arms' configurations once the study's own problems are fixed. YAML is read with a safe loader that
also rejects duplicate keys (which ``yaml.safe_load`` silently collapses to the last one).
"""

from __future__ import annotations

from ablate.study.checker import StudyError, read_yaml
from ablate.study.load import load_study
from ablate.study.model import (
    DEFAULT_BUDGET,
    SEED_PATH,
    Arm,
    EntryRule,
    Factor,
    Level,
    Objective,
    SeedRange,
    Study,
    TrialSpec,
    TuneParam,
    TuneSpec,
    level_name,
)
from ablate.yamlio import FileProblem, LineDict, LineList, plain

__all__ = [
    "DEFAULT_BUDGET",
    "SEED_PATH",
    "Arm",
    "EntryRule",
    "Factor",
    "Level",
    "LineDict",
    "LineList",
    "Objective",
    "SeedRange",
    "Study",
    "StudyError",
    "FileProblem",
    "TrialSpec",
    "TuneParam",
    "TuneSpec",
    "level_name",
    "load_study",
    "plain",
    "read_yaml",
]
