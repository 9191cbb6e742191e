"""ONTAP backend against a fake ONTAP REST server on loopback (netapp-ontap parses its bodies).

The NFS data path runs on a local directory that a fake mount table presents as the volume's
NFS mount (no NFS client exists on the test machines); the S3 data path runs on moto.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis.stateful import run_state_machine_as_test
from lifeboatcache_backend_ontap import backend as ontap_mod
from lifeboatcache_backend_ontap.backend import OntapBackend, export_verdict
from lifeboatcache_backend_ontap.config import OntapConfig
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.config import ConfigError, LifeboatConfig, load_config_dict
from lifeboatcache_core.errors import TierUnavailableError
from lifeboatcache_core.testing import BackendContract, backend_state_machine
from lifeboatcache_core.testing.contracts import key

from tests.backends.backend_fake_ontap import FakeOntap
from tests.backends.backend_servers import MotoServer, free_port

CLIENT = "10.0.0.5"


@pytest.fixture
def fake() -> Iterator[FakeOntap]:
    cluster = FakeOntap().start()
    cluster.add_volume("lbk", "/lifeboat")
    cluster.add_policy("default", [FakeOntap.rule(1, "10.0.0.0/24")])
    yield cluster
    cluster.stop()


@pytest.fixture
def mounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A mount table in which ``tmp_path/mnt`` is the NFS mount of 10.0.0.9:/lifeboat."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    table = tmp_path / "mounts"
    table.write_text(f"/dev/sda1 / ext4 rw 0 0\n10.0.0.9:/lifeboat {mnt} nfs4 rw,vers=4.1 0 0\n")
    monkeypatch.setattr(ontap_mod, "MOUNTS_FILE", str(table))
    return mnt


def options(fake: FakeOntap, path: Path, **extra: Any) -> dict[str, Any]:
    return {"cluster": fake.url, "username": "admin", "password": "netapp1!", "svm": "svm1", "volume": "lbk",
            "path": str(path), "client_address": CLIENT, "request_timeout_s": 2.0,
            "protocol_options": {"require_nfs_mount": False}, **extra}


def reason(fake: FakeOntap, path: Path, **extra: Any) -> str:
    backend = OntapBackend(OntapConfig(**options(fake, path, **extra)), tier="ontap")
    with pytest.raises(TierUnavailableError) as info:
        backend.probe()
    return str(info.value)


class TestOntapNfsContract(BackendContract):
    @pytest.fixture(autouse=True)
    def _cluster(self, fake: FakeOntap, mounts: Path) -> None:
        self.fake, self.mnt = fake, mounts

    def make_backend(self, tmp_path: Path) -> OntapBackend:
        backend = OntapBackend(OntapConfig(**options(self.fake, self.mnt)), tier="ontap")
        backend.probe()
        return backend


def test_ontap_state_machine(fake: FakeOntap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each example gets a fresh directory under the temp dir, which this mount table shows as NFS."""
    table = tmp_path / "mounts"
    table.write_text(f"10.0.0.9:/lifeboat {tempfile.gettempdir()} nfs4 rw 0 0\n")
    monkeypatch.setattr(ontap_mod, "MOUNTS_FILE", str(table))

    def factory(where: Path) -> OntapBackend:
        backend = OntapBackend(OntapConfig(**options(fake, where)), tier="ontap")
        backend.probe()
        return backend

    machine = backend_state_machine(factory, max_examples=5, stateful_step_count=10)
    run_state_machine_as_test(machine, settings=machine.TestCase.settings)


def test_probe_asks_ontap_for_volume_and_export_policy(fake: FakeOntap, mounts: Path) -> None:
    OntapBackend(OntapConfig(**options(fake, mounts)), tier="ontap").probe()
    paths = [r.split("?")[0] for r in fake.requests]
    assert paths == ["GET /api/storage/volumes", "GET /api/protocols/nfs/export-policies"]


def test_storage_side_problems_are_operator_reasons(fake: FakeOntap, mounts: Path) -> None:
    assert "volume 'nope' does not exist: create it, or set create_volume = true" in reason(
        fake, mounts, volume="nope")
    fake.volumes[0]["state"] = "offline"
    assert "volume 'lbk' is offline, not online" in reason(fake, mounts)
    fake.volumes[0]["state"] = "online"
    fake.volumes[0]["space"]["available"] = 512 * 1024**2
    assert "has 0.5 GiB free, below min_free_gb = 1.0" in reason(fake, mounts)
    fake.volumes[0]["space"]["available"] = 50 * 1024**3
    del fake.volumes[0]["nas"]["path"]
    assert "has no junction path" in reason(fake, mounts)
    fake.volumes[0]["nas"]["path"] = "/other"
    assert "is junctioned at /other, but" in reason(fake, mounts) and "mounts 10.0.0.9:/lifeboat" in reason(
        fake, mounts)


def test_export_policy_reasons(fake: FakeOntap, mounts: Path) -> None:
    fake.policies[0]["rules"] = [FakeOntap.rule(1, "10.1.0.0/16")]
    assert "export policy 'default' of SVM 'svm1' denies 10.0.0.5" in reason(fake, mounts)
    fake.policies[0]["rules"] = [FakeOntap.rule(1, "10.0.0.5", rw="never"), FakeOntap.rule(2, "0.0.0.0/0")]
    assert "export policy 'default' of SVM 'svm1' gives read-only access to 10.0.0.5" in reason(fake, mounts)


def test_export_rule_matching_follows_rule_order() -> None:
    rule = FakeOntap.rule
    assert export_verdict([rule(2, "0.0.0.0/0"), rule(1, "10.0.0.5", rw="never")], "10.0.0.5") == "ro"
    assert export_verdict([rule(1, ".lab.example"), rule(2, "host1")], "host1") == "rw"
    assert export_verdict([rule(1, ".lab.example")], "a.lab.example") == "rw"
    assert export_verdict([rule(1, "10.0.0.0/8", ro="never")], "10.2.3.4") == "none"
    assert export_verdict([], "10.0.0.5") == "none"


def test_mount_that_is_not_nfs(fake: FakeOntap, tmp_path: Path, mounts: Path) -> None:
    other = tmp_path / "local"
    other.mkdir()
    assert f"{other} is not an NFS mount (ext4 at /)" in reason(fake, other)


def test_bad_credentials(fake: FakeOntap, mounts: Path) -> None:
    text = reason(fake, mounts, password="wrong")
    assert "rejected the credentials of user 'admin' (HTTP 401)" in text and "wrong" not in text


def test_create_volume(fake: FakeOntap, mounts: Path) -> None:
    fake.volumes.clear()
    backend = OntapBackend(OntapConfig(**options(fake, mounts, create_volume=True, aggregate="aggr1",
                                                 create_size_gb=10, volume="lifeboat")), tier="ontap")
    backend.probe()
    assert any(r.startswith("POST /api/storage/volumes") for r in fake.requests)
    assert fake.volumes[0]["name"] == "lifeboat" and fake.volumes[0]["nas"]["path"] == "/lifeboat"


def test_config_errors_name_the_key(fake: FakeOntap, tmp_path: Path) -> None:
    base = {"name": "ontap", "backend": "ontap", "capacity_gb": 1, "cluster": "c", "svm": "s", "volume": "v"}
    with pytest.raises(ConfigError, match="needs `path`"):
        load_config_dict({"tiers": [base]})
    with pytest.raises(ConfigError, match="o_dirctt"):
        load_config_dict({"tiers": [{**base, "path": "/x", "protocol_options": {"o_dirctt": True}}]})


def test_unreachable_cluster_starts_on_fallback_and_recovers(tmp_path: Path, mounts: Path) -> None:
    port = free_port()
    placeholder = FakeOntap(port=port)
    cache = TieredCache(LifeboatConfig.model_validate({
        "tiers": [{"name": "ontap", "backend": "ontap", "capacity_gb": 1, "reprobe_seconds": 0.1,
                   **options(placeholder, mounts)}],
        "fallback_local": {"path": str(tmp_path / "fallback")},
    }), background_index=False)
    cluster = None
    try:
        health = {h["tier"]: h for h in cache.health()}
        assert not health["ontap"]["up"]
        assert f"cannot reach the cluster's REST API at http://127.0.0.1:{port}" in health["ontap"]["reason"]
        assert health["fallback"]["up"] and cache.put([key(1)], [b"a" * 100]) == [True]
        cluster = FakeOntap(port=port).start()  # the cluster comes back
        cluster.add_volume("lbk", "/lifeboat")
        cluster.add_policy("default", [FakeOntap.rule(1, "0.0.0.0/0")])
        deadline = time.monotonic() + 10
        while not cache.health()[0]["up"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cache.health()[0]["up"], cache.health()
        assert cache.put([key(2)], [b"b" * 100]) == [True]
        buf = bytearray(100)
        assert cache.get([key(2)], [buf]) == [True] and bytes(buf) == b"b" * 100
    finally:
        cache.close()
        if cluster is not None:
            cluster.stop()


def test_s3_protocol_checks_the_bucket_then_uses_the_s3_backend(fake: FakeOntap, moto: MotoServer,
                                                                aws_env: None, tmp_path: Path) -> None:
    bucket = f"ontap-{secrets.token_hex(4)}"
    opts = {"cluster": fake.url, "username": "admin", "password": "netapp1!", "svm": "svm1", "volume": "lbk",
            "protocol": "s3", "bucket": bucket, "request_timeout_s": 2.0,
            "protocol_options": {"endpoint_url": moto.endpoint, "region": "us-east-1", "max_attempts": 1}}
    backend = OntapBackend(OntapConfig(**opts), tier="ontap")
    with pytest.raises(TierUnavailableError, match=f"SVM 'svm1' has no S3 bucket '{bucket}'"):
        backend.probe()
    fake.add_bucket(bucket)
    boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    backend.probe()
    k = key(5)
    backend.put(k, [b"s3data" * 100], BlockMeta.new(k, 600))
    assert bytes(backend.read(k)[1]) == b"s3data" * 100
    assert [k2 for k2, _ in backend.scan()] == [k]


def test_client_address_defaults_to_the_route_toward_the_nfs_server(fake: FakeOntap, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    table = tmp_path / "mounts"
    table.write_text(f"127.0.0.1:/lifeboat {mnt} nfs4 rw 0 0\n")  # the NFS server is this host
    monkeypatch.setattr(ontap_mod, "MOUNTS_FILE", str(table))
    opts = options(fake, mnt)
    del opts["client_address"]
    fake.policies[0]["rules"] = [FakeOntap.rule(1, "10.0.0.0/8")]
    with pytest.raises(TierUnavailableError, match=r"export policy 'default' of SVM 'svm1' denies 127\.0\.0\.1"):
        OntapBackend(OntapConfig(**opts), tier="ontap").probe()
    fake.policies[0]["rules"] = [FakeOntap.rule(1, "127.0.0.0/8")]
    OntapBackend(OntapConfig(**opts), tier="ontap").probe()
