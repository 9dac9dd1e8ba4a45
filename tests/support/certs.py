"""Certificates made for one test run: a CA, broker and client certificates signed by it, and the bad
ones refusal tests need (expired, signed by another CA), as PEM and PKCS12 files with passwords.

Made with the `cryptography` package (real X.509, real keys), so every TLS test speaks to the broker the
way an operator's clients would, without a certificate checked into the repository.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "test-secret"


@dataclass(frozen=True)
class CertFiles:
    """One identity's files: `cert` (PEM, leaf then CA), `key` (PEM, unencrypted), `key_encrypted` (PEM,
    encrypted with PASSWORD), `p12` (PKCS12 keystore with PASSWORD), `cn` its common name."""

    cn: str
    cert: Path
    key: Path
    key_encrypted: Path
    p12: Path


@dataclass(frozen=True)
class TestPki:
    """A CA (`ca_pem`, `ca_p12` a PKCS12 truststore) and what it signed; `other_ca_pem` trusts nothing here."""

    __test__ = False  # not a pytest class

    dir: Path
    ca_pem: Path
    ca_p12: Path
    other_ca_pem: Path
    broker: CertFiles
    client: CertFiles
    expired_client: CertFiles
    untrusted_client: CertFiles
    expired_broker: CertFiles

    def identity(self, cn: str) -> CertFiles:
        """A further client certificate signed by the CA, with this common name (principal User:CN=...)."""
        return _issue(self.dir, cn, self._ca(), server=False)

    def _ca(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        cert = x509.load_pem_x509_certificate(self.ca_pem.read_bytes())
        key = serialization.load_pem_private_key((self.dir / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key


def make_pki(directory: Path) -> TestPki:
    """Write a CA and its certificates into `directory` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(directory, "kafkalite-test-ca", "ca")
    other = _make_ca(directory, "some-other-ca", "other-ca")
    now = dt.datetime.now(dt.UTC)
    ca_p12 = directory / "truststore.p12"
    ca_p12.write_bytes(pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca[0], b"ca")],
        serialization.BestAvailableEncryption(PASSWORD.encode())))
    return TestPki(
        dir=directory,
        ca_pem=directory / "ca.pem",
        ca_p12=ca_p12,
        other_ca_pem=directory / "other-ca.pem",
        broker=_issue(directory, "broker", ca, server=True),
        client=_issue(directory, "client", ca, server=False),
        expired_client=_issue(directory, "expired-client", ca, server=False,
                              not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1)),
        untrusted_client=_issue(directory, "untrusted-client", other, server=False),
        expired_broker=_issue(directory, "expired-broker", ca, server=True,
                              not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1)),
    )


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _make_ca(directory: Path, cn: str, stem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{stem}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert, key


def _issue(directory: Path, cn: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], *, server: bool,
           not_before: dt.datetime | None = None, not_after: dt.datetime | None = None) -> CertFiles:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before or now - dt.timedelta(days=1))
               .not_valid_after(not_after or now + dt.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    files = CertFiles(cn=cn, cert=directory / f"{cn}.pem", key=directory / f"{cn}.key",
                      key_encrypted=directory / f"{cn}.enc.key", p12=directory / f"{cn}.p12")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM)
                           + ca_cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
    files.key_encrypted.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSWORD.encode())))
    files.p12.write_bytes(pkcs12.serialize_key_and_certificates(
        cn.encode(), key, cert, [ca_cert], serialization.BestAvailableEncryption(PASSWORD.encode())))
    return files
