"""Test-only helpers that the operator package must not carry: installing the operator in a test
cluster (`operator_install`, also used by `bench/operator_apply.py`), the Pod Security
`restricted` checker (`pss`) and the reader of the chart's generated RBAC (`chart_rbac`)."""
