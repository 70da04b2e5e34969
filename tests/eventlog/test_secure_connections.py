"""Connecting to a secured broker: TLS with a private CA, nkey authentication."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import nkeys
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devtools.broker import LocalNatsServer
from proto import subjects
from proto.events import NodeObserved
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog


def _write_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1 signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tenon test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def _event() -> NodeObserved:
    return make_event(
        NodeObserved, producer="test", key=("n",), change="added", node={"metadata": {"name": "n"}}
    )


async def test_tls_with_a_private_ca(tmp_path: Path) -> None:
    ca, cert, key = _write_certificates(tmp_path)
    with LocalNatsServer(extra_args=("--tls", "--tlscert", str(cert), "--tlskey", str(key))) as server:
        secure = await JetStreamEventLog.connect(
            ConnectionSettings(
                servers=(f"tls://127.0.0.1:{server.port}",), tls_ca_file=str(ca), max_reconnect_attempts=0
            )
        )
        result = await secure.publish(subjects.node("n"), _event())
        assert result.sequence == 1
        await secure.close()
        with pytest.raises(Exception, match="cannot reach NATS"):  # a client that does not trust the CA
            await JetStreamEventLog.connect(
                ConnectionSettings(
                    servers=(f"tls://127.0.0.1:{server.port}",), max_reconnect_attempts=0, connect_timeout=1.0
                )
            )


async def test_nkey_authentication(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(seed).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed)
    config = tmp_path / "nkey.conf"
    config.write_text(f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n')
    with LocalNatsServer(extra_args=("--config", str(config))) as server:
        with_key = await JetStreamEventLog.connect(
            ConnectionSettings(servers=(server.url,), nkey_seed_file=str(seed_file), max_reconnect_attempts=0)
        )
        assert (await with_key.publish(subjects.node("n"), _event())).sequence == 1
        await with_key.close()
        with pytest.raises(Exception, match="cannot reach NATS"):
            await JetStreamEventLog.connect(
                ConnectionSettings(servers=(server.url,), max_reconnect_attempts=0, connect_timeout=1.0)
            )
