"""Bad config is a clear error at config time, naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lifeboatcache_core.config import LifeboatConfig, load_config, load_config_dict
from lifeboatcache_core.errors import ConfigError


def tier(tmp_path: Path, **extra: object) -> dict[str, object]:
    return {"backend": "file", "capacity_gb": 1, "path": str(tmp_path), **extra}


def test_defaults_are_valid() -> None:
    cfg = LifeboatConfig()
    assert [t.backend for t in cfg.tiers] == ["dram", "file"]
    assert cfg.engine.on_error == "serve"


def test_unknown_backend_suggests_and_lists() -> None:
    with pytest.raises(ConfigError) as err:
        load_config_dict({"tiers": [{"backend": "fiel", "capacity_gb": 1}]})
    msg = str(err.value)
    assert "unknown backend 'fiel'" in msg and "Did you mean 'file'" in msg and "dram, file" in msg


def test_unknown_top_level_key_lists_valid_keys() -> None:
    with pytest.raises(ConfigError, match=r"tierz: unknown key; valid keys: "
                                          r"dashboard, engine, fallback_local, promote, staging, tiers"):
        load_config_dict({"tierz": []})


def test_unknown_backend_option_names_key_and_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config_dict({"tiers": [tier(tmp_path, pathh="/x")]})
    msg = str(err.value)
    assert "pathh: unknown key" in msg and "durability" in msg and "o_direct" in msg


def test_missing_key() -> None:
    with pytest.raises(ConfigError, match=r"tiers.0.capacity_gb: required key is missing"):
        load_config_dict({"tiers": [{"backend": "dram"}]})


def test_missing_backend_option() -> None:
    with pytest.raises(ConfigError, match=r"path: required key is missing"):
        load_config_dict({"tiers": [{"backend": "file", "capacity_gb": 1}]})


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ({"capacity_gb": "lots"}, "tiers.0.capacity_gb"),
        ({"capacity_gb": -1}, "tiers.0.capacity_gb"),
        ({"durability": "sometimes"}, "durability"),
        ({"io_threads": 0}, "tiers.0.io_threads"),
        ({"write": "sideways"}, "tiers.0.write"),
    ],
)
def test_wrong_types(tmp_path: Path, override: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        load_config_dict({"tiers": [tier(tmp_path, **override)]})


def test_unknown_codec_and_policy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown codec 'zip'"):
        load_config_dict({"tiers": [tier(tmp_path, codec="zip")]})
    with pytest.raises(ConfigError, match="unknown policy 'lfu'"):
        load_config_dict({"tiers": [tier(tmp_path, policy="lfu")]})


def test_duplicate_tier_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tier names must be unique"):
        load_config_dict({"tiers": [tier(tmp_path), tier(tmp_path)]})


def test_first_party_package_missing_says_what_to_install() -> None:
    from lifeboatcache_core.plugins import get_registry

    get_registry().entries["backend"].pop("ontap", None)  # as if lifeboatcache-backend-ontap were absent
    with pytest.raises(ConfigError, match=r"pip install 'lifeboatcache\[ontap\]'"):
        load_config_dict({"tiers": [{"backend": "ontap", "capacity_gb": 1}]})


def test_toml_and_yaml_files(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(f'[[tiers]]\nbackend = "file"\ncapacity_gb = 2\npath = "{tmp_path}"\n')
    assert load_config(toml).tiers[0].capacity_bytes == 2 * 1024**3
    yml = tmp_path / "c.yaml"
    yml.write_text(f"tiers:\n  - backend: file\n    capacity_gb: 2\n    path: {tmp_path}\n")
    assert load_config(yml).tiers[0].backend_options.path == tmp_path  # type: ignore[attr-defined]


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tiers]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lifeboatcache", *args], capture_output=True, text=True, timeout=60)


def _validate_problems(path: Path, count: int) -> dict[str, str]:
    """``lifeboatcache config validate PATH``: exit 2, ``count`` problems, ``{key path: reason}``."""
    result = _cli("config", "validate", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].endswith(f"{count} problems"), result.stderr
    return {line.strip().split(": ", 1)[0]: line.split(": ", 1)[1] for line in lines[1:]}


def test_cli_config_validate(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(f'[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "{tmp_path}"\n')
    assert _cli("config", "validate", str(good)).returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "{tmp_path}"\nfsync = true\n')
    result = _cli("config", "validate", str(bad))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].endswith("1 problem") and len(lines) == 2 and "tiers.0.fsync: unknown key" in lines[1]


def test_cli_config_validate_lists_every_problem_at_once(tmp_path: Path) -> None:
    """An unknown backend name and a wrong type in one tier, a misspelt option in another and
    an unknown engine key: all four, each with its key path, names with the did-you-mean."""
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[tiers]]\nname = "nvme"\nbackend = "fille"\ncapacity_gb = "lots"\n\n'
        f'[[tiers]]\nname = "disk"\nbackend = "file"\ncapacity_gb = 1\npath = "{tmp_path}"\n'
        'durabilty = "fsync"\n\n[engine]\non_eror = "serve"\n')
    problems = _validate_problems(bad, 4)
    assert set(problems) == {"tiers.0.backend", "tiers.0.capacity_gb", "tiers.1.durabilty", "engine.on_eror"}
    assert "Did you mean 'file'?" in problems["tiers.0.backend"]
    assert "did you mean 'durability'?" in problems["tiers.1.durabilty"]
    assert "did you mean 'on_error'?" in problems["engine.on_eror"]
    assert "valid number" in problems["tiers.0.capacity_gb"]


def test_staging_table_is_validated_with_key_paths(tmp_path: Path) -> None:
    """``[staging]`` settings: the stager's rate, lead time, grace and switch, each checked by name."""
    cfg = load_config_dict({"staging": {"enabled": False, "rate_mb_s": 50, "lead_s": 2}})
    assert (cfg.staging.enabled, cfg.staging.rate_bytes_s, cfg.staging.lead_s) == (False, 50e6, 2.0)
    assert LifeboatConfig().staging.enabled is True
    bad = tmp_path / "bad.toml"
    bad.write_text('[staging]\nrate_mb_s = 0\nlead_s = -1\nthread_share = 1.5\nrate = 10\n')
    problems = _validate_problems(bad, 4)
    assert set(problems) == {"staging.rate_mb_s", "staging.lead_s", "staging.thread_share", "staging.rate"}
    assert "greater than 0" in problems["staging.rate_mb_s"]
    assert "greater than or equal to 0" in problems["staging.lead_s"]
    assert "less than or equal to 1" in problems["staging.thread_share"]
    assert "did you mean 'rate_mb_s'?" in problems["staging.rate"]
    with pytest.raises(ConfigError, match=r"staging\.grace_s"):
        load_config_dict({"staging": {"grace_s": "soon"}})


def test_a_manifest_url_no_store_serves_fails_at_load(tmp_path: Path) -> None:
    """The URL's scheme picks the manifest store; an unknown one is a config error naming the
    key and the close match, not a tier that fails when it opens."""
    with pytest.raises(ConfigError, match=r"tiers\.0: manifest_url: unknown manifest 'postgresq'\. "
                                          r"Did you mean 'postgresql'\? Available manifests: postgresql, sqlite"):
        load_config_dict({"tiers": [tier(tmp_path, manifest_url="postgresq://db.example/kv")]})
    with pytest.raises(ConfigError, match=r"manifest_url: '/var/m\.sqlite' is not a URL"):
        load_config_dict({"tiers": [tier(tmp_path, manifest_url="/var/m.sqlite")]})
    for url in (f"sqlite:///{tmp_path / 'm.sqlite'}", "postgresql+psycopg://lifeboat@db.example/kv"):
        assert load_config_dict({"tiers": [tier(tmp_path, manifest_url=url)]}).tiers[0].manifest_url == url
    # without a manifest the URL is never opened, so it is not checked either
    assert not load_config_dict({"tiers": [tier(tmp_path, manifest=False, manifest_url="nope://x")]}).tiers[0].manifest


def test_a_known_manifest_store_whose_package_is_missing_still_loads(tmp_path: Path) -> None:
    """Not a typo but a node without the package: the tier says what to install when it opens
    (tests/backends/test_fleet.py), the config is not refused."""
    from lifeboatcache_core.plugins import get_registry

    get_registry().entries["manifest"].pop("postgresql", None)  # as if lifeboatcache-manifest-postgres were absent
    url = "postgresql://db.example/kv"
    assert load_config_dict({"tiers": [tier(tmp_path, manifest_url=url)]}).tiers[0].manifest_url == url


def test_cli_config_validate_lists_a_wrong_manifest_scheme(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "{tmp_path}"\ndurabilty = "fsync"\n'
                   'manifest_url = "sqlit:///m.sqlite"\n')
    problems = _validate_problems(bad, 2)
    assert set(problems) == {"tiers.0.durabilty", "tiers.0.manifest_url"}
    assert "unknown manifest 'sqlit'. Did you mean 'sqlite'?" in problems["tiers.0.manifest_url"]


def test_an_adapters_options_sit_in_its_own_engine_table_checked_by_its_model(tmp_path: Path) -> None:
    """``[engine.vllm]`` is the vLLM adapter's: core keeps it as written, the adapter's registered
    model checks it at load, each problem under its key path; core's own engine key is on_error."""
    cfg = load_config_dict({"engine": {"on_error": "fail", "vllm": {"native_cpu_gb": 8, "promotion_budget": 0.25}}})
    assert cfg.engine.on_error == "fail"
    assert cfg.engine.adapter_table("vllm") == {"native_cpu_gb": 8, "promotion_budget": 0.25}
    assert cfg.engine.adapter_table("sglang") == {}
    assert load_config_dict(cfg.model_dump(mode="json")).engine == cfg.engine  # survives a dump (vLLM ships it)
    with pytest.raises(ConfigError, match=r"engine\.vllm\.native_cpu_gb: Input should be greater than 0; "
                                          r"engine\.vllm\.promotion_budgt: unknown key; "
                                          r".*did you mean 'promotion_budget'"):
        load_config_dict({"engine": {"vllm": {"native_cpu_gb": -1, "promotion_budgt": 0.2}}})
    with pytest.raises(ConfigError, match=r"engine\.vllm: must be a table"):
        load_config_dict({"engine": {"vllm": 8}})
    with pytest.raises(ConfigError, match=r"engine\.vlm: unknown key; valid keys: on_error, .*vllm; "
                                          r"did you mean 'vllm'"):
        load_config_dict({"engine": {"vlm": {}}})

    bad = tmp_path / "bad.toml"
    bad.write_text('[engine]\non_error = "fail"\n[engine.vllm]\nnative_cpu_gb = 0\nvllm_mode = "sglang"\n')
    problems = _validate_problems(bad, 2)
    assert set(problems) == {"engine.vllm.native_cpu_gb", "engine.vllm.vllm_mode"}


def test_an_adapter_option_at_the_engine_level_says_where_it_moved() -> None:
    """Configs written before the adapters owned their options: one line that says the new place."""
    with pytest.raises(ConfigError, match=r"engine\.native_cpu_gb: an option of the vllm adapter: move it to its "
                                          r"own table, \[engine\.vllm\] native_cpu_gb = "):
        load_config_dict({"engine": {"native_cpu_gb": 8}})


def test_the_table_of_an_adapter_not_installed_here_is_kept_unchecked() -> None:
    """One config file for nodes running different engines: a node without the vLLM adapter
    loads it, and keeps the table for whoever reads it."""
    from lifeboatcache_core.plugins import get_registry

    get_registry().entries["adapter"].pop("vllm", None)  # as if lifeboatcache-vllm were absent
    cfg = load_config_dict({"engine": {"vllm": {"native_cpu_gb": 8, "not_checked_here": 1}}})
    assert cfg.engine.adapter_table("vllm") == {"native_cpu_gb": 8, "not_checked_here": 1}
