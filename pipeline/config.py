"""Pipeline configuration: nested frozen dataclasses, built in Python or loaded from TOML.

`PipelineConfig` holds the run id, the transport settings and the `Topology` (which actor
groups run, how many of each, with which options). Addresses are derived here, with a
per-run suffix: `ipc://<run_dir>/<role>-<index>` locally, `tcp://host:port` across hosts,
`inproc://<run_id>/<role>-<index>` in one process. A TOML file mirrors the dataclasses
(`[transport]`, `[[topology.actors]]`); every mistake is a `ConfigError` that names the
key and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import secrets
import tempfile
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from actors.options import ConfigError as ConfigError  # options and config raise the same

#: the longest path a unix (ipc) socket may have: sizeof(sockaddr_un.sun_path) - 1 on Linux
IPC_PATH_MAX = 107

DRIVER = "driver"
CONTROL = "control"


@dataclass(frozen=True, kw_only=True)
class ActorGroup:
    """`count` actors of one kind under one role name. `role`: the name other actors and
    addresses use ("scheduler", "generator", ...; alphanumeric, not "driver" or
    "control"). `kind`: a registered actor kind (`pipeline.launch.registry.ACTOR_KINDS`) or
    an import path "package.module:Class" of your own actor. `count`: how many actors of
    this role (the scheduler and trainer read the generators' count from here). `hosts`:
    tcp only, one host per actor ("" = `transport.host`). `options`: the kind's options
    table (below, by kind); keys left out keep their defaults."""

    role: str
    kind: str
    count: int = 1
    hosts: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.role.replace("_", "").isalnum() or self.role in (DRIVER, CONTROL):
            raise ConfigError(f"actor role {self.role!r} must be alphanumeric and not reserved")
        if self.count < 1:
            raise ConfigError(f"actors.{self.role}.count must be >= 1, got {self.count}")
        if self.hosts and len(self.hosts) != self.count:
            raise ConfigError(f"actors.{self.role}.hosts must name one host per actor")


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Which actors run. `actors`: the actor groups (`[[topology.actors]]`), roles unique."""

    actors: tuple[ActorGroup, ...]

    def __post_init__(self) -> None:
        roles = [g.role for g in self.actors]
        if len(set(roles)) != len(roles):
            raise ConfigError(f"duplicate actor roles in topology: {roles}")

    def group(self, role: str) -> ActorGroup:
        for g in self.actors:
            if g.role == role:
                return g
        raise ConfigError(f"no actor role {role!r} in topology (roles: {self.roles})")

    @property
    def roles(self) -> list[str]:
        return [g.role for g in self.actors]

    def instances(self) -> list[tuple[str, int]]:
        return [(g.role, i) for g in self.actors for i in range(g.count)]


@dataclass(frozen=True, kw_only=True)
class TransportConfig:
    """How actors reach each other. `scheme`: "ipc" (one host, unix sockets), "tcp" (many hosts)
    or "inproc" (one process). `run_dir`: where ipc sockets and actor logs go ("" = the system's
    temporary folder + "/seer-<uid>", one per user, mode 0700; the run id is appended, and
    that folder is made mode 0700 too). `host`: the tcp host of actors without
    `hosts`, and of the driver. `base_port`: tcp ports are `base_port` + 0 (control), + 1
    (driver), + 2 ... (each actor in topology order). `hwm`: ZeroMQ's high-water mark, messages
    queued per socket before a send waits. `max_header_mib`: the largest message header a
    receiver accepts (larger is refused with a `ProtocolError`; token ids and logprobs travel
    in frames, not the header). `max_frame_mib`: the largest tensor frame a receiver accepts.
    A sender refuses to encode a message over either (`MessageTooLarge`). `curve_keys`: a
    folder made by `seer keys`, required for tcp. `allow_insecure_tcp`: tcp without CURVE,
    only on a trusted network."""

    scheme: Literal["ipc", "tcp", "inproc"] = "ipc"
    run_dir: str = ""
    host: str = "127.0.0.1"
    base_port: int = 15500
    hwm: int = 1000
    max_header_mib: int = 16
    max_frame_mib: int = 4096
    curve_keys: str = ""
    allow_insecure_tcp: bool = False

    def __post_init__(self) -> None:
        if self.scheme == "tcp" and not self.curve_keys and not self.allow_insecure_tcp:
            raise ConfigError(
                "tcp transport needs transport.curve_keys (a folder made by `seer keys`); "
                "set transport.allow_insecure_tcp = true only on a trusted network"
            )
        if not 1024 <= self.base_port <= 65000:
            raise ConfigError(f"transport.base_port {self.base_port} out of range 1024..65000")


def default_run_root() -> str:
    """Where runs go without `transport.run_dir`: one folder per user, `$TMPDIR/seer-<uid>`
    (made private, mode 0700, by the launcher: `pipeline.launch.rundir`)."""
    return os.path.join(tempfile.gettempdir(), f"seer-{os.getuid()}")


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """A topology and how it runs. `topology`: the actors (`[[topology.actors]]`).
    `transport`: sockets and security (`[transport]`). `run_id`: the per-run suffix of every
    address (alphanumeric and dashes; random when omitted). `heartbeat_s`: how often
    actors send heartbeats (a silent peer counts as lost after a few). `ready_timeout_s`:
    how long the launcher waits for every actor to report ready (actors importing torch on
    a loaded 2-core host take minutes). `stop_timeout_s`: how long a clean stop may take
    before the launcher signals the actor. `log_level`: the actors' structlog level.
    `log_dir`: where the local launcher writes each actor's log, `<role>-<index>.log` (""
    = `<run_dir>/logs`; `seer run` sets its run folder's `logs/`)."""

    topology: Topology
    transport: TransportConfig = field(default_factory=TransportConfig)
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    heartbeat_s: float = 1.0
    ready_timeout_s: float = 180.0
    stop_timeout_s: float = 10.0
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_dir: str = ""

    def __post_init__(self) -> None:
        if not self.run_id.replace("-", "").isalnum():
            raise ConfigError(f"run_id {self.run_id!r} must be alphanumeric (dashes allowed)")
        for name in ("heartbeat_s", "ready_timeout_s", "stop_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")

    @property
    def run_dir(self) -> Path:
        base = self.transport.run_dir or default_run_root()
        return Path(base) / self.run_id

    def log_folder(self) -> Path:
        """The actors' logs folder: `log_dir`, else the run folder's `logs/`."""
        return Path(self.log_dir) if self.log_dir else self.run_dir / "logs"

    def address(self, role: str, index: int = 0) -> str:
        """Where actor `role`/`index` (or the driver / control socket) listens."""
        scheme = self.transport.scheme
        if scheme == "inproc":
            return f"inproc://{self.run_id}/{role}-{index}"
        if scheme == "ipc":
            return f"ipc://{self.run_dir}/{role}-{index}"
        return f"tcp://{self._host(role, index)}:{self._port(role, index)}"

    def check_ipc_paths(self) -> None:
        """Refuse, naming `transport.run_dir`, an ipc run whose socket paths are too long for
        a unix socket (a deep `run_dir` otherwise fails at the first bind, in zmq's words)."""
        if self.transport.scheme != "ipc":
            return
        names = [(DRIVER, 0), (CONTROL, 0), *self.topology.instances()]
        longest = max((self.address(r, i)[len("ipc://") :] for r, i in names), key=len)
        if len(longest) > IPC_PATH_MAX:
            raise ConfigError(
                f"transport.run_dir: the ipc socket path {longest!r} is {len(longest)} "
                f"characters, over the {IPC_PATH_MAX} a unix socket allows; choose a shorter "
                "transport.run_dir"
            )

    def _host(self, role: str, index: int) -> str:
        if role in (DRIVER, CONTROL):
            return self.transport.host
        group = self.topology.group(role)
        return group.hosts[index] if group.hosts else self.transport.host

    def _port(self, role: str, index: int) -> int:
        if role == CONTROL:
            return self.transport.base_port
        if role == DRIVER:
            return self.transport.base_port + 1
        offset = self.topology.instances().index((role, index))
        return self.transport.base_port + 2 + offset


# --- TOML ---------------------------------------------------------------------------


def load_config(path: str | Path) -> PipelineConfig:
    """Read a TOML file into a `PipelineConfig`; `ConfigError` says what is wrong."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    return config_from_dict(data, where=str(p))


def config_from_dict(data: Mapping[str, Any], where: str = "config") -> PipelineConfig:
    config: PipelineConfig = _build(PipelineConfig, data, where)
    return config


def config_to_toml(config: Any) -> str:
    """A config dataclass (`PipelineConfig`, `RunConfig`) as TOML (None values left out)."""
    text: str = tomli_w.dumps(_plain(dataclasses.asdict(config)))
    return text


def save_config(config: PipelineConfig, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(config_to_toml(config))
    return p


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _build(cls: type[Any], data: Any, where: str, base: Any = None) -> Any:
    """`cls` from a table; a nested table's keys left out keep the field's default (its
    enclosing dataclass's: `RunConfig.generator`'s `max_batch` is 128, not the class's)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        guess = did_you_mean(cls, unknown[0])  # the guess, else every key it could be
        raise ConfigError(
            f"{where}: unknown keys {unknown}" + (guess or f"; expected some of {sorted(fields)}")
        )
    kwargs = {
        k: _value(
            hints[k],
            v,
            f"{where}.{k}",
            getattr(base, k) if base is not None else _field_default(fields[k]),
        )
        for k, v in data.items()
    }
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except (TypeError, ValueError) as exc:  # options validate in __post_init__
        raise ConfigError(f"{where}: {exc}") from None


def _field_default(f: dataclasses.Field[Any]) -> Any:
    """A field's default when it is a dataclass instance (what a sub-table starts from)."""
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        value = None if f.default is dataclasses.MISSING else f.default
    return value if dataclasses.is_dataclass(value) else None


def _value(tp: Any, value: Any, where: str, base: Any = None) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, value, where, base if isinstance(base, tp) else None)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected an array, got {type(value).__name__}")
        return tuple(_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], value, where, base)
    if origin is Mapping or origin is dict or tp is Any:
        if origin is not None and not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
        return value
    if tp is float and type(value) in (int, float):
        return float(value)
    if isinstance(tp, type) and type(value) is not tp:
        raise ConfigError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
    return value


def did_you_mean(cls: type[Any], key: str) -> str:
    """ "; did you mean X?" for an unknown `key` of dataclass `cls`: a field of a nested
    table by that name (`lr` -> `trainer.lr`), else a field spelt alike; "" if none."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    nested = [
        f"{name}.{key}"
        for name in names
        if dataclasses.is_dataclass(hints[name])
        and key in {f.name for f in dataclasses.fields(hints[name])}
    ]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.7)
    guesses = nested or close
    return f"; did you mean {' or '.join(map(repr, guesses))}?" if guesses else ""


def apply_overrides(obj: Any, assignments: Sequence[str], where: str = "--set") -> Any:
    """`obj` (a config dataclass) with dotted `KEY=VALUE` assignments applied in order
    (`generator.max_batch=64`): the value is read as TOML (`64`, `5e-4`, `true`, `[1, 2]`,
    `"text"`), a bare word or a value for a text field as text; every mistake is the
    `ConfigError` the same key in a TOML file gives, prefixed with the assignment. A key
    with no dot that is not a field of `obj` but names a field of exactly one of its tables
    is that field (`lr=5e-4` is `trainer.lr=5e-4`)."""
    for text in assignments:
        key, sep, raw = text.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise ConfigError(
                f"{where} {text!r}: expected KEY=VALUE with a dotted KEY (generator.max_batch=64)"
            )
        path = _short_key(type(obj), path, f"{where} {text}")
        value = _override_value(type(obj), path, raw.strip())
        for part in reversed(path):
            value = {part: value}
        obj = _build(type(obj), value, f"{where} {text}: {type(obj).__name__}", base=obj)
    return obj


def _short_key(cls: type[Any], path: list[str], where: str) -> list[str]:
    """`path`, or [table, key] when `path` is one key that `cls` lacks and exactly one of its
    dataclass fields (a table) has; a key two tables have is refused, naming both."""
    if len(path) != 1 or not dataclasses.is_dataclass(cls):
        return path
    hints = typing.get_type_hints(cls)
    if path[0] in hints:
        return path
    tables = [
        name
        for name, tp in hints.items()
        if dataclasses.is_dataclass(tp) and path[0] in typing.get_type_hints(tp)
    ]
    if len(tables) > 1:
        options = " or ".join(f"{t}.{path[0]}" for t in tables)
        raise ConfigError(f"{where}: {path[0]!r} is ambiguous: say {options}")
    return [tables[0], path[0]] if tables else path


def _override_value(cls: type[Any], path: list[str], raw: str) -> Any:
    """`raw` as TOML, or as text when it is not TOML or the field at `path` takes text."""
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare word: text (a wrong type is the TOML's error below)
    tp: Any = cls
    for part in path:
        hints = typing.get_type_hints(tp) if dataclasses.is_dataclass(tp) else {}
        tp = hints.get(part)
    if isinstance(value, str) or tp is None:
        return value
    args = typing.get_args(tp)
    text_field = tp is str or (
        typing.get_origin(tp) is Literal and all(isinstance(a, str) for a in args)
    )
    return raw if text_field else value


def build_options(cls: type[Any] | None, options: Mapping[str, Any], where: str) -> Any:
    """An actor's options dataclass from its `[topology.actors.options]` table."""
    if cls is None:
        if options:
            raise ConfigError(f"{where}: this actor takes no options, got {sorted(options)}")
        return None
    return _build(cls, options, where)
