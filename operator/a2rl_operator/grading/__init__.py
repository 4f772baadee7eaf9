"""Grading in a cluster: what the operator decides and reads to score BenchSubmissions and end a run.

- `decisions`: pure decisions (admission, submission status, the run's aggregate, end-of-run steps);
- `config`: `GradingConfig`, read once at start-up as part of `OperatorConfig`;
- `kube`: Kubernetes I/O of grading (BenchSubmissions, pods of Jobs, their logs, the grading policy);
- `store`: the operator's reads and writes in a run's object store.

The kopf handlers that use them are in `benchsubmission.py` and `benchrun.py`.
"""
