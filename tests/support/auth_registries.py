"""Registries that require authentication, for the tests: Debian's docker-registry (distribution 2.8) with an
htpasswd file (bcrypt, made with the ``bcrypt`` library), or with token auth, its tokens issued by a small
token service run here (the Docker registry token protocol: ES256 JWTs whose x5c chain ends at the CA the
registry is configured to trust). Each registry is started on a free loopback port and stopped by PID."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from pinmatrix.engine.services import Service

SERVICE = "pinmatrix-test-registry"
ISSUER = "pinmatrix-test-issuer"


@pytest.fixture(autouse=True)
def no_ambient_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the credentials a test writes: a private HOME, no auth file variables (autouse where imported)."""
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG", "PINMATRIX_TRUSTED_KEYS",
                 "PINMATRIX_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_docker_registry(directory: Path, auth_yaml: str, timeout: float = 30) -> Service:
    """docker-registry on a free loopback port with ``auth_yaml`` as its ``auth:`` section."""
    exe = shutil.which("docker-registry")
    assert exe, "docker-registry is not installed"
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = directory / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {directory / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n" + auth_yaml
    )
    log = open(directory / "registry.log", "wb")  # noqa: SIM115 - kept open for the child's lifetime
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {(directory / 'registry.log').read_text()[-500:]}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return Service("docker-registry", proc.pid, directory, {}, f"127.0.0.1:{port}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("docker-registry did not come up")


def write_htpasswd(path: Path, users: dict[str, str]) -> None:
    path.write_text("".join(f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"
                            for u, p in users.items()))


def write_auth_file(path: Path, host: str, user: str, password: str, *, key: str | None = None) -> Path:
    """A containers auth.json / docker config.json with one entry (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {key or host: {"auth": auth}}}))
    os.chmod(path, 0o600)
    return path


# ------------------------------------------------------------------------------------------ token auth


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenIssuer:
    """A CA the registry trusts (``rootcertbundle``) and a leaf key that signs tokens."""

    ca_pem: bytes
    leaf_key: ec.EllipticCurvePrivateKey
    chain: list[str]  # base64 DER, leaf first

    @classmethod
    def create(cls) -> TokenIssuer:
        now = dt.datetime.now(dt.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pinmatrix test token CA")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
              .not_valid_after(now + dt.timedelta(days=1))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                           data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                           crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])).issuer_name(ca_name)
                .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
                .sign(ca_key, hashes.SHA256()))
        chain = [base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode() for c in (leaf, ca)]
        return cls(ca.public_bytes(serialization.Encoding.PEM), leaf_key, chain)

    def token(self, subject: str, access: list[dict]) -> str:
        header = {"typ": "JWT", "alg": "ES256", "x5c": self.chain}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": secrets.token_hex(8), "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        der = self.leaf_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


@dataclass
class TokenService:
    url: str
    requests: list[dict]  # what was asked: {"user", "scopes"}


@contextmanager
def token_service(issuer: TokenIssuer, users: dict[str, str]) -> Iterator[TokenService]:
    """The token endpoint: Basic credentials of ``users`` get every action they ask for; anonymous requests
    get a token with no access (as public registries do); wrong credentials get 401."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            scopes = [s for v in query.get("scope", []) for s in v.split(" ") if s]
            user = None
            header = self.headers.get("Authorization", "")
            if header.startswith("Basic "):
                name, _, password = base64.b64decode(header[6:]).decode().partition(":")
                if users.get(name) != password:
                    self.send_response(401)
                    self.end_headers()
                    return
                user = name
            seen.append({"user": user, "scopes": scopes})
            access = []
            if user is not None:
                for scope in scopes:
                    kind, _, rest = scope.partition(":")
                    name, _, actions = rest.rpartition(":")
                    access.append({"type": kind, "name": name, "actions": actions.split(",")})
            body = json.dumps({"token": issuer.token(user or "", access)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield TokenService(f"http://127.0.0.1:{server.server_address[1]}/token", seen)
    finally:
        server.shutdown()
        server.server_close()


def token_auth_yaml(realm: str, rootcert: Path) -> str:
    return (f"auth:\n  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n"
            f"    rootcertbundle: {rootcert}\n")


def htpasswd_auth_yaml(path: Path) -> str:
    return f"auth:\n  htpasswd:\n    realm: pinmatrix-test\n    path: {path}\n"
