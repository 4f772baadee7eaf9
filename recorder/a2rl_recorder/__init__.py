"""The recorder (sidecar): the agent-facing grading API and workspace snapshots.

Modules, one job each: `config` (RecorderConfig from the environment), `submit` (validation of a
submitted model path), `snapshots` (code revisions + the watcher), `dispatch` (how a submission
gets evaluated; `cluster_dispatch`: as a BenchSubmission), `spool` (writes kept locally while the
store is unreachable), `state` (scores derived from the store), `service` (the API's behaviour;
it updates the workspace's run_meta.json with `a2rl.workspace.update_run_meta`), `server` (HTTP),
`app` (process lifecycle), `workspace_setup` (the cluster set-up container).
Reference for agent authors and for whoever starts the recorder: docs/recorder.md.
"""
