"""CURVE keys and authentication for tcp endpoints.

A cluster shares one CURVE key pair, made once with `seer keys DIR` and copied to every
host out of band (never committed). Servers (bound sockets) encrypt with it and a ZAP
authenticator admits only clients that present a public key found in the same folder, so
holding the cluster's secret key is what authenticates an actor. ipc and inproc endpoints
rely on filesystem permissions and the process boundary instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

KEY_NAME = "cluster"


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveKeys:
    """The cluster key pair (z85) and the folder of authorised public keys."""

    public: bytes
    secret: bytes = field(repr=False)
    directory: str

    @classmethod
    def load(cls, directory: str | Path) -> CurveKeys:
        path = Path(directory) / f"{KEY_NAME}.key_secret"
        if not path.is_file():
            raise FileNotFoundError(
                f"no CURVE key at {path}; create one with `seer keys {directory}`"
            )
        public, secret = zmq.auth.load_certificate(path)
        if secret is None:
            raise ValueError(f"{path} holds no secret key")
        return cls(public=public, secret=secret, directory=str(directory))


def generate_keys(directory: str | Path) -> Path:
    """Create the cluster key pair in `directory` (refuses to overwrite); returns its path."""
    folder = Path(directory)
    if (folder / f"{KEY_NAME}.key_secret").exists():
        raise FileExistsError(f"{folder} already holds a cluster key")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _, secret_file = zmq.auth.create_certificates(folder, KEY_NAME)
    Path(secret_file).chmod(0o600)
    return Path(secret_file)


def apply_curve(sock: Any, keys: CurveKeys, *, server: bool) -> None:
    """Turn on CURVE for `sock` before it binds or connects."""
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    if server:
        sock.curve_server = True
    else:
        sock.curve_serverkey = keys.public


def start_authenticator(ctx: zmq.Context[Any], keys: CurveKeys) -> ThreadAuthenticator:
    """A ZAP handler on `ctx` that admits only the keys in `keys.directory`."""
    auth = ThreadAuthenticator(zmq.Context.shadow(ctx.underlying))
    auth.start()
    auth.configure_curve(domain="*", location=keys.directory)
    return auth
