"""Where everything lives in the object store (docs/architecture.md, "Object layout").

    <namespace>/<run>-<uid>/run.json                     BenchRun spec + metadata at start
    <namespace>/<run>-<uid>/benchrun.json                cluster: the BenchRun's final record on deletion
    <namespace>/<run>-<uid>/clock.json                   cluster: when the agent's clock started (recorder)
    <namespace>/<run>-<uid>/blobs/<sha256>               content-addressed file contents (code and models)
    <namespace>/<run>-<uid>/revisions/<n>.json           code revision n: a TreeManifest + time + reason
    <namespace>/<run>-<uid>/submissions/<n>/manifest.json   submission n: model + code snapshot digests
    <namespace>/<run>-<uid>/submissions/<n>/result.json     evaluation result (written by the grader only)
    <namespace>/<run>-<uid>/submissions/<n>/details.jsonl   per-item eval records (never shown to the agent)
    <namespace>/<run>-<uid>/submissions/<n>/dispatch.json   why an evaluation left no result.json
    <namespace>/<run>-<uid>/submissions/<n>/seal.json       result.json's MAC under the run's key
    <namespace>/<run>-<uid>/logs/<component>.log
    <namespace>/<run>-<uid>/report/{report.json,report.md,report.html,trajectory.png}
    <namespace>/<run>-<uid>/traces/<component>-<pid>-<token>-<n>.jsonl   spans (one object per batch)
    <namespace>/<run>-<uid>/traces.jsonl                 all spans of the run, merged (a2rl.tracing)
    <namespace>/<run>-<uid>/driver/calls/<n>.jsonl       driver gateway: a batch of call records, one a line
                                                         (request + response, redacted), n = its lowest
                                                         call (a2rl.records.driver_calls; before: <n>.json)
    <namespace>/<run>-<uid>/driver/summary.json          driver gateway: running totals, per model, budget
    <namespace>/<run>-<uid>/agent/trajectory.jsonl       an agent stack's event stream
    baselines/<task>/<model-digest>/<evaluator-version>.json   baseline cache shared by all runs (cluster)
    baselines/<task>/<model-digest>/<evaluator-version>-data-<held-out digest>-signer-<key>.json  (local)
    models/<name>/manifest.json, models/blobs/<sha256>   base models pushed for `store:<name>`
                                                         sources (a2rl.models.library)
    campaigns/<namespace>/<campaign>/campaign.json       a BenchCampaign as run (its spec and metadata)
    campaigns/<namespace>/<campaign>/report/{report.json,report.md,report.html,improvement.png}
    index.html                                           every run and campaign, linked to their
                                                         reports (a2rl_grader.campaign_report.index)

Submission 0 is the baseline (the base model); the agent's submissions are numbered from 1.
Numbers in keys are zero-padded to 5 digits so listing order is numeric order.
"""

from __future__ import annotations

from dataclasses import dataclass


def _n(index: int) -> str:
    return f"{index:05d}"


@dataclass(frozen=True)
class RunLayout:
    namespace: str
    name: str
    uid: str

    @property
    def prefix(self) -> str:
        return f"{self.namespace}/{self.name}-{self.uid}"

    @property
    def run_json(self) -> str:
        return f"{self.prefix}/run.json"

    @property
    def run_clock(self) -> str:
        """Cluster mode: the agent clock's start, written once by the recorder (restarts read it)."""
        return f"{self.prefix}/clock.json"

    @property
    def blobs(self) -> str:
        return f"{self.prefix}/blobs"

    def blob(self, digest: str) -> str:
        return f"{self.blobs}/{digest}"

    @property
    def revisions(self) -> str:
        return f"{self.prefix}/revisions"

    def revision(self, index: int) -> str:
        return f"{self.revisions}/{_n(index)}.json"

    @property
    def submissions(self) -> str:
        return f"{self.prefix}/submissions"

    def submission_dir(self, index: int) -> str:
        return f"{self.submissions}/{_n(index)}"

    def submission_manifest(self, index: int) -> str:
        return f"{self.submission_dir(index)}/manifest.json"

    def submission_result(self, index: int) -> str:
        return f"{self.submission_dir(index)}/result.json"

    def submission_details(self, index: int) -> str:
        return f"{self.submission_dir(index)}/details.jsonl"

    def submission_dispatch(self, index: int) -> str:
        return f"{self.submission_dir(index)}/dispatch.json"

    def submission_seal(self, index: int) -> str:
        """The MAC of result.json (`a2rl.records.result.seal_result`), written by the trusted side."""
        return f"{self.submission_dir(index)}/seal.json"

    def log(self, component: str) -> str:
        return f"{self.prefix}/logs/{component}.log"

    @property
    def report_dir(self) -> str:
        return f"{self.prefix}/report"

    @property
    def traces(self) -> str:
        return f"{self.prefix}/traces.jsonl"

    @property
    def trace_parts(self) -> str:
        """Folder of the per-process span files that `traces.jsonl` is merged from."""
        return f"{self.prefix}/traces"

    def trace_part(self, component: str, pid: int, token: str, seq: int) -> str:
        return f"{self.trace_parts}/{component}-{pid}-{token}-{_n(seq)}.jsonl"

    @property
    def driver_calls(self) -> str:
        """Folder of the driver gateway's call records (`a2rl.records.driver.DriverCallRecord`)."""
        return f"{self.prefix}/driver/calls"

    def driver_call_batch(self, first: int) -> str:
        """A batch of call records whose lowest call number is `first`."""
        return f"{self.driver_calls}/{_n(first)}.jsonl"

    @property
    def agent_trajectory(self) -> str:
        """The agent stack's own event stream (its JSON lines: stream-json, `--json`, …)."""
        return f"{self.prefix}/agent/trajectory.jsonl"

    @property
    def driver_summary(self) -> str:
        """The driver gateway's running totals (`a2rl.records.driver.DriverSummary`)."""
        return f"{self.prefix}/driver/summary.json"

    @classmethod
    def from_prefix(cls, prefix: str) -> RunLayout:
        """Inverse of `prefix` (`<namespace>/<name>-<uid>`, uid without dashes or a UUID)."""
        namespace, rest = prefix.strip("/").split("/", 1)
        name, uid = _split_name_uid(rest)
        return cls(namespace=namespace, name=name, uid=uid)


def _split_name_uid(rest: str) -> tuple[str, str]:
    # A Kubernetes UID is a UUID (5 dash-separated groups); local runs use 12 hex chars.
    parts = rest.split("-")
    if len(parts) >= 6 and [len(p) for p in parts[-5:]] == [8, 4, 4, 4, 12]:
        return "-".join(parts[:-5]), "-".join(parts[-5:])
    return "-".join(parts[:-1]), parts[-1]


def baseline_key(task: str, model_digest: str, evaluator_version: str) -> str:
    return f"baselines/{task}/{model_digest}/{evaluator_version}.json"


def baseline_data_key(
    task: str, model_digest: str, evaluator_version: str, heldout_digest: str, signer: str | None = None
) -> str:
    """A baseline cache entry of one held-out data set (its digest). Local mode: signed by one
    machine's key (`signer`: its fingerprint), so machines sharing a store keep their own; cluster
    mode: no signer (the store is out of the agent's reach)."""
    key = f"baselines/{task}/{model_digest}/{evaluator_version}-data-{heldout_digest}"
    return f"{key}-signer-{signer}.json" if signer else f"{key}.json"


@dataclass(frozen=True)
class CampaignLayout:
    """Where a campaign's own records live (its runs keep their `RunLayout`s)."""

    namespace: str
    name: str

    @property
    def prefix(self) -> str:
        return f"campaigns/{self.namespace}/{self.name}"

    @property
    def campaign_json(self) -> str:
        """The BenchCampaign as run: its metadata and spec in wire form."""
        return f"{self.prefix}/campaign.json"

    @property
    def report_dir(self) -> str:
        return f"{self.prefix}/report"
