"""The real node's pure pieces (tests/testenv): the chart values it installs with, the pause
image archive, containerd's and CNI's configuration, and the host record. The node itself runs
in tests/node."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from a2rl.api.chart_values import ChartValues, PodDefaults
from tests.testenv import hostnet, hoststate
from tests.testenv.node import NODE_LABEL, containerd_config
from tests.testenv.node_images import PAUSE_REF, pause_archive
from tests.testenv.node_install import POD_KINDS, chart_values, local_volumes, store_secret


@pytest.mark.parametrize("pin", [False, True])
def test_the_chart_values_pass_the_charts_own_schema(pin: bool) -> None:
    values = ChartValues.model_validate(chart_values("s3://a2rl-runs/p", 9000, 6443, pin=pin))
    assert values.store.egress == [f"{hostnet.HOST_IP}/32:9000"]
    assert values.api_server.egress == [f"{hostnet.HOST_IP}/32:6443"]
    key, value = NODE_LABEL
    pinned = [getattr(values.pod_defaults, kind).node_selector for kind in POD_KINDS]
    assert pinned == ([{key: value}] * len(POD_KINDS) if pin else [{}] * len(POD_KINDS))
    assert values.operator.node_selector == ({key: value} if pin else {})


def test_every_kind_of_pod_the_operator_makes_is_pinned() -> None:
    assert set(POD_KINDS) == set(PodDefaults.model_fields)


def test_local_volumes_bind_on_first_use_on_the_node_only(tmp_path: Path) -> None:
    sc, *pvs = local_volumes("n1", [tmp_path / "a", tmp_path / "b"])
    assert (
        sc["volumeBindingMode"] == "WaitForFirstConsumer"
        and sc["provisioner"] == "kubernetes.io/no-provisioner"
    )
    assert [pv["spec"]["local"]["path"] for pv in pvs] == [str(tmp_path / "a"), str(tmp_path / "b")]
    terms = pvs[0]["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
    ]
    assert store_secret("http://e", "k", "s")["stringData"]["AWS_ENDPOINT_URL"] == "http://e"


def test_the_pause_archive_is_an_oci_image_named_for_containerd_and_reproducible(tmp_path: Path) -> None:
    binary = tmp_path / "pause-bin"
    binary.write_bytes(b"\x7fELF not really")
    first = pause_archive(binary, tmp_path / "one.tar").read_bytes()
    assert pause_archive(binary, tmp_path / "two.tar").read_bytes() == first
    with tarfile.open(tmp_path / "one.tar") as tar:

        def blob(desc: dict[str, str]) -> bytes:
            data = tar.extractfile(f"blobs/sha256/{desc['digest'].split(':')[1]}").read()  # type: ignore[union-attr]
            assert hashlib.sha256(data).hexdigest() == desc["digest"].split(":")[1]
            return data

        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        (desc,) = index["manifests"]
        assert desc["annotations"]["io.containerd.image.name"] == PAUSE_REF
        manifest = json.loads(blob(desc))
        config = json.loads(blob(manifest["config"]))
        diff = gzip.decompress(blob(manifest["layers"][0]))
        assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(diff).hexdigest()}"]
        assert config["config"]["Entrypoint"] == ["/pause"]
        with tarfile.open(fileobj=io.BytesIO(diff)) as layer:
            member = layer.getmember("pause")
            assert member.mode == 0o755 and layer.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_containerd_config_is_toml_keeping_everything_under_the_nodes_folders(tmp_path: Path) -> None:
    conf = tomllib.loads(containerd_config(tmp_path / "state", tmp_path / "root"))
    cri = conf["plugins"]["io.containerd.grpc.v1.cri"]
    assert conf["root"] == str(tmp_path / "root") and conf["grpc"]["address"].startswith(
        str(tmp_path / "state")
    )
    assert cri["sandbox_image"] == PAUSE_REF and cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["Root"].startswith(str(tmp_path / "state")) and runc["SystemdCgroup"] is False


def test_the_pods_network_has_no_masquerade_and_keeps_its_leases_in_the_nodes_folder(tmp_path: Path) -> None:
    bridge = hostnet.cni_config(tmp_path)["plugins"][0]  # type: ignore[index]
    assert bridge["ipMasq"] is False and bridge["bridge"] == hostnet.CNI_BRIDGE
    assert bridge["ipam"]["dataDir"] == str(tmp_path)
    assert bridge["ipam"]["ranges"] == [[{"subnet": hostnet.POD_SUBNET, "gateway": hostnet.POD_GATEWAY}]]


def test_the_host_record_round_trips_and_lists_what_changed(tmp_path: Path) -> None:
    record = hoststate.HostRecord(
        sysctls={"vm/overcommit_memory": "0"}, pids={"kubelet": (12, "/bin/kubelet")}
    )
    record.save(tmp_path / "r.json")
    loaded = hoststate.HostRecord.load(tmp_path / "r.json")
    assert loaded == record
    assert hoststate.HostRecord.load(tmp_path / "missing.json") is None
    assert hoststate.sysctl_changes({"a": "0", "b": "1"}, {"a": "1", "b": "1"}) == {"a": ("0", "1")}
    assert hoststate.sysctl_changes({"a": "0"}, {}) == {"a": ("0", None)}


def test_the_settings_read_are_writable_ones_without_per_interface_or_volatile_entries() -> None:
    values = hoststate.read_sysctls()
    assert "vm/overcommit_memory" in values and "kernel/panic" in values
    assert not hoststate.VOLATILE_SYSCTLS & set(values)
    assert not [k for k in values if k.startswith(("net/ipv4/conf/", "net/ipv4/neigh/"))]
