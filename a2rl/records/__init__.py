"""The documents a2rl writes to the store: one module per document, each a pydantic `Record`
(`base`: snake_case fields as stored, unknown fields kept, only the fields set are written).

    run.py         run.json                                    RunRecord (+ run_record builder)
    revision.py    revisions/<n>.json                          CodeRevision
    submission.py  submissions/<n>/manifest.json               SubmissionManifest
    result.py      submissions/<n>/result.json                 ResultRecord
    dispatch.py    submissions/<n>/dispatch.json               DispatchRecord
    baseline.py    baselines/<task>/<digest>/<version>.json    BaselineEntry
    tree.py        the tree manifests inside them              TreeRecord (a2rl.store.cas.TreeManifest)
    benchrun.py    benchrun.json (a deleted BenchRun, cluster) FinalRunRecord
    report.py      report/report.json                          ReportRecord (built by a2rl_grader.report)
    library.py     models/<name>/manifest.json                 ModelLibraryManifest
    artifact.py    data/<task>/<version>-seed<s>/<split>/manifest.json  ArtifactManifest
    driver.py      driver/calls/<n>.jsonl, driver/summary.json DriverCallRecord, DriverSummary
    driver_calls.py  reading and writing the call records in batches (driver/calls/<n>.jsonl)

`base.read_record` / `load_record` / `write_record` read and write them through an `ObjectStore`;
`base.load_record` / `parse_record` fail with one line (`RecordError`) on a document that does not fit.
"""
