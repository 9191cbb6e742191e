"""`pip install lifeboatcache` without an extra, then a config naming that backend: the error
says which extra to install. The backend's distribution is hidden from entry-point discovery,
which is what an environment without it looks like to the plugin loader."""

from __future__ import annotations

from importlib.metadata import entry_points as real_entry_points
from typing import Any

import pytest
from lifeboatcache_core.config import ConfigError, load_config_dict
from lifeboatcache_core.plugins import reset_registry

from lifeboatcache_core import plugins

OPTIONS = {
    "s3": {"url": "s3://bucket/kv"},
    "nfs": {"path": "/mnt/kv"},
    "ontap": {"cluster": "c", "svm": "s", "volume": "v", "path": "/mnt/kv"},
    "fsspec": {"url": "memory://kv"},
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_config_naming_an_uninstalled_backend_says_which_extra(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = f"lifeboatcache-backend-{name}"

    def without_dist(**kwargs: Any) -> list[Any]:
        return [ep for ep in real_entry_points(**kwargs) if not (ep.dist and ep.dist.name == dist)]

    monkeypatch.setattr(plugins, "entry_points", without_dist)
    reset_registry()
    with pytest.raises(ConfigError) as info:
        load_config_dict({"tiers": [{"backend": name, "capacity_gb": 1, **OPTIONS[name]}]})
    assert f"pip install 'lifeboatcache[{name}]'" in str(info.value)
    assert dist in str(info.value)


@pytest.mark.parametrize(("name", "model"), [("s3", "S3Config"), ("nfs", "NFSConfig"), ("ontap", "OntapConfig"),
                                             ("fsspec", "FsspecConfig")])
def test_installed_backends_validate_with_their_own_model(name: str, model: str) -> None:
    config = load_config_dict({"tiers": [{"backend": name, "capacity_gb": 1, **OPTIONS[name]}]})
    assert type(config.tiers[0].backend_options).__name__ == model
