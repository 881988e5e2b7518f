"""Judging results: the statistics a report and a plan of seeds rest on, pure functions of tidy tables.

- :mod:`ablate.stats.analysis`: reductions per trial (the objective of each) and the saturating compute fits;
- :mod:`ablate.stats.contrast`: a contrast and the seeds it improved on (what inference computes and sequential re-tests, shared by both);
- :mod:`ablate.stats.inference`: paired t, the linear model, Holm's family, TOST, power;
- :mod:`ablate.stats.intervals`: the one-sample t-interval and the levels both tests share;
- :mod:`ablate.stats.sequential`: the two-stage test of a study whose seeds were extended after its report was read;
- :mod:`ablate.stats.meta`: a contrast replicated over contexts (random-effects pooling, the verdicts across contexts);
- :mod:`ablate.stats.planning`: seeds needed from a pilot; adaptive-seed rounds.
"""
