"""Configuration: pydantic models that reject unknown keys and list the valid ones.

A config is TOML or YAML (or a dict). Tier entries name their backend, codec and policy by
registered name; the backend's own options sit flat in the tier table and are validated
against that backend's config model, so a typo in ``path`` is caught at config time.

    [[tiers]]
    name = "nvme"
    backend = "file"
    path = "/var/cache/lifeboat"
    capacity_gb = 200
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import platformdirs
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from lifeboatcache_core.abc import PluginConfig
from lifeboatcache_core.errors import ConfigError, LifeboatError, UnknownPluginError
from lifeboatcache_core.integrity import BlockSigner, signer_from_keys
from lifeboatcache_core.registry import Kind

#: what an engine does when our cache cannot start: serve without it, or refuse to start
OnError = Literal["serve", "fail"]

ENV_CONFIG = "LIFEBOAT_CACHE_CONFIG"
GB = 1024**3


def default_cache_dir() -> Path:
    """Where tiers live unless configured: the user's cache dir (XDG on Linux)."""
    return Path(platformdirs.user_cache_dir("lifeboatcache"))


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _validate_plugin_options(kind: Kind, name: str, options: dict[str, Any], where: str) -> PluginConfig:
    from lifeboatcache_core.plugins import get_registry

    try:
        model = get_registry().config_model(kind, name)
    except LifeboatError as exc:
        raise ValueError(str(exc)) from None
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        raise ValueError(f"{where}: {format_validation_error(exc, model, prefix='')}") from None


def manifest_scheme(url: str) -> str:
    """The manifest store a URL selects: its scheme without a driver (``postgresql+psycopg://`` → ``postgresql``)."""
    return url.partition(":")[0].partition("+")[0].lower()


def _check_manifest_url(url: str) -> None:
    """Fail at config load, not when the tier opens, when no store is registered for the URL's scheme.

    Opening a tier with an unknown scheme takes the tier down at start, so a misspelt scheme
    is reported with the other config problems. A first-party store whose package is not
    installed here (``postgresql`` without ``lifeboatcache-manifest-postgres``) is a valid
    config on a node that lacks it: as before, that tier is down with the install hint as its
    reason when it opens, and the others serve.
    """
    from lifeboatcache_core.plugins import get_registry

    if ":" not in url:
        raise ValueError(f"{url!r} is not a URL: give its scheme (sqlite:///path/manifest.sqlite, "
                         "postgresql://host/db)")
    try:
        get_registry().registration("manifest", manifest_scheme(url))
    except UnknownPluginError as exc:
        raise ValueError(str(exc)) from None
    except LifeboatError:
        pass  # known but not loadable here: the tier reports it when it opens


class TierConfig(BaseModel):
    """One tier. Keys not listed here are the backend's own options."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    backend: str
    capacity_gb: float = Field(gt=0)
    codec: str = "none"
    codec_options: dict[str, Any] = Field(default_factory=dict)
    #: store blocks raw while the tier is filled less than this share of its room (capacity, or
    #: what the filesystem has); 0 encodes every block. A codec costs CPU on every store and load
    #: and pays only once capacity binds.
    codec_from_fill: float = Field(default=0.0, ge=0.0, le=1.0)
    policy: str = "lru"
    policy_options: dict[str, Any] = Field(default_factory=dict)
    write: Literal["through", "back"] = "through"
    io_threads: int = Field(default=4, ge=1, le=256)
    #: how much lower than the process the tier's write-pool threads run (their nice value is
    #: raised by this much; Linux). Stores, demotions and staging copies are work the engine never
    #: waits for, but their encoding and hashing take a core from its forward passes on a busy
    #: host; niced, they run in the time the engine leaves. Loads keep the process's priority (a
    #: request waits for them). 0: stores compete with the engine as equals.
    write_nice: int = Field(default=10, ge=0, le=19)
    unhealthy_after: int = Field(default=5, ge=1)
    reprobe_seconds: float = Field(default=5.0, gt=0)
    probe_seconds: float = Field(default=30.0, gt=0)
    manifest: bool = True
    manifest_url: str | None = None
    #: other processes write this tier too (SGLang MLA ranks, several engines on one NFS export):
    #: a key missing from this process's index is looked up on the backend (one stat) before it
    #: counts as a miss, and adopted into the index when found
    shared: bool = False
    #: a full tier evicts a session's block (stored with a ``BlockHint.depth``) for a new one only
    #: if it has been idle for longer than sessions take to come back; otherwise it declines the
    #: new block (lifeboatcache_core.prefixes): the live sessions' heads that are there stay whole
    #: (a deep token costs more to recompute than a shallow one), while the blocks of sessions
    #: that ended still make room. Blocks without a depth (e.g. after a restart) are always evictable.
    keep_prefixes: bool = True
    #: the idle time after which a block is no longer protected; None learns it from the return
    #: gaps the tier sees (1.5 times their 90th percentile; 600 s until 32 were seen)
    keep_prefixes_idle_s: float | None = Field(default=None, gt=0)
    #: predictive staging (lifeboatcache_core.staging): blocks of a session expected back soon (a
    #: ``TieredCache.stage`` hint, or the policy's estimate) are copied into this tier from the tiers
    #: below before it returns, into free room or over victims a lower tier still holds. Not on the
    #: bottom tier, which has nothing below it to stage from (a config error)
    stage: bool = False
    #: "keyed" signs every block (HMAC-SHA256) so writers without the key cannot plant KV in a
    #: shared tier (lifeboatcache_core.integrity); "xxh3" detects damage only
    integrity: Literal["xxh3", "keyed"] = "xxh3"
    #: accepted keys, newest first (used for writes); empty: read from ``integrity_keys_env``
    integrity_keys: list[str] = Field(default_factory=list, repr=False)
    integrity_keys_env: str = "LIFEBOATCACHE_INTEGRITY_KEYS"
    #: keyed tiers: the algorithm of new tags (reads accept both); "blake3" needs ``pip install blake3``
    integrity_algorithm: Literal["hmac-sha256", "blake3"] = "hmac-sha256"

    _backend_options: PluginConfig | None = PrivateAttr(default=None)
    _codec_options: PluginConfig | None = PrivateAttr(default=None)
    _policy_options: PluginConfig | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_plugins(self) -> TierConfig:
        self._backend_options = _validate_plugin_options(
            "backend", self.backend, dict(self.model_extra or {}), f"backend {self.backend!r}"
        )
        self._codec_options = _validate_plugin_options("codec", self.codec, self.codec_options, "codec_options")
        self._policy_options = _validate_plugin_options("policy", self.policy, self.policy_options, "policy_options")
        if self.manifest and self.manifest_url is not None:
            try:
                _check_manifest_url(self.manifest_url)
            except ValueError as exc:
                raise ValueError(f"manifest_url: {exc}") from None
        if self.integrity == "keyed":
            self.integrity_signer()  # a missing or weak key is a config error, not a serving-time surprise
        return self

    def integrity_signer(self) -> BlockSigner | None:
        """The block signer of a keyed tier (keys from config, else the environment); None for xxh3."""
        if self.integrity != "keyed":
            return None
        return signer_from_keys(self.integrity_keys, self.integrity_keys_env, f"tier {self.label!r}",
                                self.integrity_algorithm)

    @property
    def label(self) -> str:
        return self.name or self.backend

    @property
    def capacity_bytes(self) -> int:
        return int(self.capacity_gb * GB)

    @property
    def backend_options(self) -> PluginConfig:
        assert self._backend_options is not None
        return self._backend_options

    @property
    def codec_config(self) -> PluginConfig:
        assert self._codec_options is not None
        return self._codec_options

    @property
    def policy_config(self) -> PluginConfig:
        assert self._policy_options is not None
        return self._policy_options


class FallbackConfig(StrictModel):
    """The local file tier used when no persistent tier passes its probe (DESIGN §6)."""

    path: Path = Field(default_factory=lambda: default_cache_dir() / "fallback")
    capacity_gb: float = Field(default=10.0, gt=0)
    enabled: bool = True


class EngineConfig(BaseModel):
    """How engines use the cache: ``on_error`` is the core's (``engine.open_for_engine``); every
    other key is an adapter's name and its table that adapter's own options, checked against the
    config model the adapter registers (``register.adapter(name, ..., config=...)``) as a tier's
    backend options are against its backend's:

        [engine]
        on_error = "fail"
        [engine.vllm]
        native_cpu_gb = 8

    The core never reads an adapter's table; the adapter does (``adapter_table``). A table of an
    adapter that is known but not installed here is kept unchecked, so one config file serves
    nodes that run different engines.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    on_error: OnError = "serve"

    @model_validator(mode="after")
    def _adapter_tables(self) -> EngineConfig:
        for name, table in (self.model_extra or {}).items():
            problems = _adapter_table_problems(name, table)
            if problems:
                reason = "; ".join(f"{where}: {why}" for where, why in problems)
                raise PydanticCustomError(_RECHECKED, "{reason}", {"where": "", "reason": reason})
        return self

    def adapter_table(self, name: str) -> dict[str, Any]:
        """``[engine.<name>]`` as written (empty when absent): the adapter validates it with its own model."""
        return dict((self.model_extra or {}).get(name) or {})


def _adapter_table_problems(name: str, table: Any) -> list[tuple[str, str]]:
    """``(key path, reason)`` per problem of the engine key ``name``: no such adapter, or its
    table breaks the adapter's model (each option under its own path, ``engine.vllm.native_cpu_gb``)."""
    from lifeboatcache_core.plugins import get_registry

    registry = get_registry()
    where = f"engine.{name}"
    try:
        model = registry.config_model("adapter", name)
    except UnknownPluginError:
        owners = [a for a in registry.names("adapter") if name in _declared_options(a)]
        if owners:
            return [(where, f"an option of the {owners[0]} adapter: move it to its own table, "
                            f"[engine.{owners[0]}] {name} = ...")]
        return [(where, _unknown_key(name, ["on_error", *registry.names("adapter")]))]
    except LifeboatError:
        return []  # a known adapter not installed here: its own nodes check the table
    if not isinstance(table, dict):
        return [(where, f"must be a table of the {name} adapter's options ([engine.{name}])")]
    try:
        model.model_validate(table)
    except ValidationError as exc:
        return [(f"{where}.{key}" if key else where, reason) for key, reason in validation_problems(exc, model)]
    return []


def _declared_options(adapter: str) -> set[str]:
    """The option names of an adapter that registers its config model by import string.

    Only those: loading an adapter's class to find its model may import its engine.
    """
    from lifeboatcache_core.plugins import get_registry

    registry = get_registry()
    if not registry.registration("adapter", adapter).config:
        return set()
    try:
        return set(registry.config_model("adapter", adapter).model_fields)
    except LifeboatError:
        return set()


class DashboardConfig(StrictModel):
    """The node dashboard (``lifeboatcache dashboard``; engine adapters start it unless disabled)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=9400, ge=1, le=65535)
    #: token for config writes; None: a random one is generated at start and printed once
    token: str | None = Field(default=None, min_length=16)


class StagingConfig(StrictModel):
    """Predictive staging (``lifeboatcache_core.staging``): how fast and how early, and whether at all.

    Which tiers receive staged blocks is each tier's ``stage = true``; this table is the
    stager's own budget, shared by all of them. Its defaults suit a local NVMe or DRAM target fed
    from a remote store at a few hundred MB/s; lower ``rate_mb_s`` when the engine's own loads
    share a thin link with staging. All of it applies live (``TieredCache.apply_config``).

        [staging]
        enabled = true
        rate_mb_s = 200
        lead_s = 0.5
    """

    #: off: no blocks are staged or taken back, whatever the tiers' ``stage`` says (hints are
    #: accepted and ignored), so one switch turns the feature off for a whole node
    enabled: bool = True
    #: average MB/s (10^6 bytes) the stager reads from lower tiers, over all sessions: its share of
    #: their bandwidth, so staging never starves the engine's own loads
    rate_mb_s: float = Field(default=200.0, gt=0, le=1_000_000)
    #: start a session's staging at least this many seconds before its expected return (more for a
    #: larger session or one whose blocks sit in a slow tier)
    lead_s: float = Field(default=0.5, ge=0, le=3600)
    #: staged blocks not used by the expected return plus this many seconds are taken back (waste)
    grace_s: float = Field(default=10.0, gt=0, le=86400)
    #: share of a source tier's ``io_threads`` staging may hold at once (at least one thread)
    thread_share: float = Field(default=0.5, gt=0, le=1)
    #: also stage from the eviction policy's own return estimates (e.g. EpiCache), not only from
    #: ``TieredCache.stage`` hints
    from_policy: bool = True

    @property
    def rate_bytes_s(self) -> float:
        return self.rate_mb_s * 1e6


#: the error type of a problem a model validator finds under a key path of its choosing (the
#: stack as a whole naming one tier's key, an adapter's table): ``_problem`` reports it under
#: ``ctx["where"]``; ``config_problems`` skips it and checks the mapping itself, key by key
_RECHECKED = "rechecked"


def _stack_problems(tiers: list[tuple[str, bool]]) -> list[tuple[str, str]]:
    """``(key path, reason)`` per problem of the stack ``(label, stage)``, top first.

    ``stage = true`` on the bottom tier is an error, not a no-op: staging copies a session's
    blocks *up* from the tiers below the one marked, and the bottom tier has none, so the
    setting would silently do nothing where its author expects a fast tier to be filled.
    """
    if not tiers or not tiers[-1][1]:
        return []
    label = tiers[-1][0]
    return [(f"tiers.{len(tiers) - 1}.stage",
             f"stage = true on the bottom tier {label!r}: there is no tier below it to stage from "
             "(staging copies a session's blocks up into the tiers marked); set it on a tier above")]


def _default_tiers() -> list[TierConfig]:
    return [
        TierConfig(name="dram", backend="dram", capacity_gb=2),
        TierConfig(name="nvme", backend="file", capacity_gb=50, path=str(default_cache_dir() / "tier")),
    ]


class LifeboatConfig(StrictModel):
    """The whole configuration."""

    tiers: list[TierConfig] = Field(default_factory=_default_tiers, min_length=1)
    promote: bool = True
    fallback_local: FallbackConfig = Field(default_factory=FallbackConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    staging: StagingConfig = Field(default_factory=StagingConfig)

    @model_validator(mode="after")
    def _unique_names(self) -> LifeboatConfig:
        labels = [t.label for t in self.tiers]
        dupes = sorted({n for n in labels if labels.count(n) > 1})
        if dupes:
            raise ValueError(
                f"tier names must be unique; give each tier a distinct `name` (repeated: {', '.join(dupes)})"
            )
        for where, reason in _stack_problems([(t.label, t.stage) for t in self.tiers]):
            raise PydanticCustomError(_RECHECKED, "{reason}", {"where": where, "reason": reason})
        return self


# ----------------------------------------------------------------------------- loading


def _valid_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Field names of the model found by walking ``loc`` (the parent of the bad key)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = field.annotation
        args = getattr(current, "__args__", None)
        if args:  # list[Model] / Model | None
            current = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return None


def validation_problems(exc: ValidationError, model: type[BaseModel]) -> list[tuple[str, str]]:
    """``(key path, reason)`` per problem (path "" when it concerns no key); unknown keys list the valid ones.

    The dashboard shows these next to the field they name; ``format_validation_error`` joins them.
    """
    return [_problem(err, model) for err in exc.errors()]


def _problem(err: Any, model: type[BaseModel]) -> tuple[str, str]:
    loc = tuple(err["loc"])
    where = ".".join(str(p) for p in loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        return where, _unknown_key(str(loc[-1]) if loc else "", _valid_keys(model, loc[:-1]))
    if err["type"] == "missing":
        return where, "required key is missing"
    if err["type"] == _RECHECKED:
        return err["ctx"]["where"], err["ctx"]["reason"]
    return (where if loc else "", err["msg"].removeprefix("Value error, "))


def _unknown_key(name: str, valid: list[str] | None) -> str:
    close = difflib.get_close_matches(name, valid or [], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return "unknown key" + (f"; valid keys: {', '.join(valid)}" if valid else "") + hint


#: a tier's problem found by the plugin checks, not the field checks (see ``config_problems``)
_TIER_LEVEL = ("value_error", "assertion_error")


def config_problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Every problem of a config mapping at once: ``(key path, reason)``, in file order.

    ``load_config_dict`` stops a tier at its first kind of problem: its plugin names and
    options are checked only once its own fields are valid, and its backend's options arrive
    as one message. A person fixing a file wants the whole list (``lifeboatcache config
    validate``): so each tier's plugin names (with the did-you-mean) and plugin options are
    checked here on their own, each option under its key path (``tiers.0.path``), and an
    unknown key of a tier is offered the closest of the tier's keys and its backend's options.
    """
    try:
        LifeboatConfig.model_validate(data)
        return []
    except ValidationError as exc:
        errors = exc.errors()
    tiers = data.get("tiers")
    plugin_problems = {i: _tier_plugin_problems(i, t) for i, t in enumerate(tiers if isinstance(tiers, list) else [])
                       if isinstance(t, dict)}
    problems: list[tuple[str, str]] = []
    for err in errors:
        loc = tuple(err["loc"])
        tier_level = len(loc) == 2 and loc[0] == "tiers" and isinstance(loc[1], int)
        if tier_level and err["type"] in _TIER_LEVEL and plugin_problems.get(loc[1]):
            continue  # the plugin checks below say it, key by key
        if err["type"] == _RECHECKED:
            continue  # checked below on the mapping itself, which also works when other checks failed
        problems.append(_problem(err, LifeboatConfig))
    for i in sorted(plugin_problems):
        problems.extend(plugin_problems[i])
    if isinstance(tiers, list) and tiers and isinstance(tiers[-1], dict):
        problems.extend(_stack_problems([(str(t.get("name") or t.get("backend")), _is_true(t.get("stage")))
                                         if isinstance(t, dict) else ("?", False) for t in tiers]))
    engine = data.get("engine")
    for name, table in (engine.items() if isinstance(engine, dict) else ()):
        if name not in EngineConfig.model_fields:
            problems.extend(_adapter_table_problems(name, table))
    return problems


def _is_true(value: Any) -> bool:
    """Whether the model would read ``value`` as True (``stage = "yes"`` in YAML is true too)."""
    try:
        return TypeAdapter(bool).validate_python(value) is True
    except ValidationError:
        return False


def _tier_plugin_problems(i: int, tier: dict[str, Any]) -> list[tuple[str, str]]:
    """The plugin names and options of tier ``i``, whatever its other fields say."""
    from lifeboatcache_core.plugins import get_registry

    registry = get_registry()
    out: list[tuple[str, str]] = []
    tier_keys = sorted(TierConfig.model_fields)
    checks: list[tuple[Kind, str, Any, dict[str, Any], str]] = [
        ("backend", "backend", tier.get("backend"), {k: v for k, v in tier.items() if k not in TierConfig.model_fields},
         f"tiers.{i}."),
        ("codec", "codec", tier.get("codec", "none"), tier.get("codec_options") or {}, f"tiers.{i}.codec_options."),
        ("policy", "policy", tier.get("policy", "lru"), tier.get("policy_options") or {}, f"tiers.{i}.policy_options."),
    ]
    for kind, key, name, options, prefix in checks:
        if not isinstance(name, str):
            continue  # the field check reports it
        try:
            model = registry.config_model(kind, name)
        except LifeboatError as exc:
            out.append((f"tiers.{i}.{key}", str(exc)))
            continue
        if not isinstance(options, dict):
            continue
        try:
            model.model_validate(options)
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(err["loc"])
                where = prefix + ".".join(str(p) for p in loc)
                if err["type"] == "extra_forbidden":
                    valid = sorted(model.model_fields) + (tier_keys if kind == "backend" else [])
                    out.append((where, _unknown_key(str(loc[-1]), sorted(set(valid)))))
                elif err["type"] == "missing":
                    out.append((where, f"required {kind} option is missing"))
                else:
                    out.append((where, err["msg"].removeprefix("Value error, ")))
    url = tier.get("manifest_url")
    if isinstance(url, str) and tier.get("manifest", True) is not False:
        try:
            _check_manifest_url(url)
        except ValueError as exc:
            out.append((f"tiers.{i}.manifest_url", str(exc)))
    return out


def format_validation_error(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """One line per problem: ``key.path: reason``; unknown keys list the valid ones."""
    return "; ".join(
        f"{prefix}{where}: {reason}" if where else f"{prefix}{reason}"
        for where, reason in validation_problems(exc, model)
    )


def parse_text(text: str, fmt: Literal["toml", "yaml"]) -> dict[str, Any]:
    try:
        data = tomllib.loads(text) if fmt == "toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"not valid {fmt.upper()}: {exc}".replace("\n", " ")) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"the top level of a config must be a table/mapping, got {type(data).__name__}")
    return data


def load_config_dict(data: dict[str, Any]) -> LifeboatConfig:
    """Validate a config mapping; raise ``ConfigError`` with a one-line reason naming the key."""
    try:
        return LifeboatConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, LifeboatConfig)) from None


def load_config(path: str | os.PathLike[str]) -> LifeboatConfig:
    """Load a TOML (``.toml``) or YAML (``.yaml``/``.yml``) config file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from None
    fmt: Literal["toml", "yaml"] = "yaml" if p.suffix in (".yaml", ".yml") else "toml"
    return load_config_dict(parse_text(text, fmt))


def config_from_env(path: str | os.PathLike[str] | None = None) -> LifeboatConfig:
    """The config file ``path`` if given (an adapter's own setting), else ``$LIFEBOAT_CACHE_CONFIG``
    if set, else the embedded defaults."""
    path = path or os.environ.get(ENV_CONFIG)
    return load_config(path) if path else LifeboatConfig()


def engine_on_error(config: Callable[[], LifeboatConfig], override: object = None) -> OnError:
    """``engine.on_error`` for settings that may themselves be broken (import-light: adapters'
    settings modules, loaded in every engine process, call it).

    The adapter's own override wins when it is a valid value, else the config's value; a
    config that cannot be read gives the default, so a broken config still says how to fail.
    """
    if override in ("serve", "fail"):
        return override  # type: ignore[return-value]
    try:
        return config().engine.on_error
    except Exception:
        return EngineConfig().on_error
