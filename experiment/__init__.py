"""The experiment: the pipeline and its stages, evaluation in the browser, results, statistics and the report.

Above collection (``rollout``), dataset building (``trees``) and the JAX library (``tgpo_jax``); nothing below
imports it."""
