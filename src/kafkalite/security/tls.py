"""TLS contexts from Kafka's `ssl.*` settings, for broker listeners and for clients (the broker's own
inter-broker connections, the CLI tools, Spark's broker mode).

Operators bring the keystores and truststores their Kafka brokers and Java clients already use, so the names
and defaults are Kafka's: PKCS12 and PEM keystores (JKS only when the file is in fact PKCS12, as Java 9+
reads it; a real JKS file is refused with the keytool command that converts it), `ssl.client.auth`,
`ssl.enabled.protocols`, `ssl.cipher.suites` (IANA names as Java writes them, or OpenSSL's), and
`ssl.endpoint.identification.algorithm` on the client side. OpenSSL (Python's `ssl`) does the TLS; the
`cryptography` package reads PKCS12 files and the client certificate's distinguished name.

A certificate's principal is Kafka's default (`ssl.principal.mapping.rules=DEFAULT`): `User:` and the
subject's distinguished name in RFC 2253 form, most specific attribute first (`User:CN=alice,O=acme`).
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalite.errors import InvalidConfigError

# TLS 1.3's suites: OpenSSL enables all three and Python's ssl cannot choose among them.
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class TlsSettings:
    """One side's TLS settings, as Kafka names them (empty string: not set). `key_location` is librdkafka's
    separate key file (ssl.key.location) beside a PEM certificate file in keystore_location."""

    keystore_type: str = "JKS"
    keystore_location: str = ""
    keystore_password: str = ""
    key_password: str = ""
    keystore_certificate_chain: str = ""
    keystore_key: str = ""
    key_location: str = ""
    truststore_type: str = "JKS"
    truststore_location: str = ""
    truststore_password: str = ""
    truststore_certificates: str = ""
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    protocol: str = "TLSv1.3"
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification: str = "https"
    where: str = ""  # how errors name the settings ("listener SSL", "client.properties")

    @classmethod
    def read(cls, get: Callable[[str], Any], where: str = "") -> TlsSettings:
        """From a getter of parsed registry values (`BrokerConfig.listener_prop` bound to a listener, or a
        client's properties parsed by the same registry)."""
        return cls(
            keystore_type=str(get("ssl.keystore.type")).upper(),
            keystore_location=get("ssl.keystore.location"),
            keystore_password=get("ssl.keystore.password"),
            key_password=get("ssl.key.password"),
            keystore_certificate_chain=get("ssl.keystore.certificate.chain"),
            keystore_key=get("ssl.keystore.key"),
            truststore_type=str(get("ssl.truststore.type")).upper(),
            truststore_location=get("ssl.truststore.location"),
            truststore_password=get("ssl.truststore.password"),
            truststore_certificates=get("ssl.truststore.certificates"),
            client_auth=str(get("ssl.client.auth")).lower(),
            enabled_protocols=tuple(get("ssl.enabled.protocols")),
            protocol=str(get("ssl.protocol")),
            cipher_suites=tuple(get("ssl.cipher.suites")),
            endpoint_identification=str(get("ssl.endpoint.identification.algorithm")).lower(),
            where=where,
        )

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_certificate_chain)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context: its certificate (required), the CAs client certificates must chain to, and
    whether one is asked for (ssl.client.auth requested) or required."""
    if not settings.has_keystore:
        raise InvalidConfigError(f"{settings.where}: an SSL listener needs a keystore: set ssl.keystore.location "
                                 "(PKCS12 or PEM) or ssl.keystore.certificate.chain and ssl.keystore.key "
                                 "(ssl.keystore.type=PEM)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, settings)
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[settings.client_auth]
    if settings.client_auth != "none":
        _load_trust(ctx, settings, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: the broker's certificate checked against the truststore (the system's CAs when none
    is given, as Java's cacerts), its name checked when ssl.endpoint.identification.algorithm=https, and the
    keystore (if any) sent as client certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = settings.endpoint_identification == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _common(ctx, settings)
    _load_trust(ctx, settings)
    return ctx


def _common(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    """Versions, ciphers and the keystore, the same on both sides."""
    enabled = [p for p in s.enabled_protocols if p in _VERSIONS]
    if not enabled:
        raise InvalidConfigError(f"{s.where}: ssl.enabled.protocols names no TLS version kafkalite supports "
                                 f"({', '.join(_VERSIONS)})")
    top = {"TLS": "TLSv1.3", "TLSV1.2": "TLSv1.2", "TLSV1.3": "TLSv1.3"}[s.protocol.upper()]
    enabled = [p for p in enabled if p <= top] or enabled
    ctx.minimum_version = _VERSIONS[min(enabled)]
    ctx.maximum_version = _VERSIONS[max(enabled)]
    if s.cipher_suites:
        _set_ciphers(ctx, s)
    if s.has_keystore:
        _load_keystore(ctx, s)


def _set_ciphers(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    """ssl.cipher.suites: TLS 1.2 suites by IANA name (Java's) or OpenSSL name. TLS 1.3's suites cannot be
    chosen with Python's ssl: listing all three keeps TLS 1.3 on; listing none turns it off (as in Java, where
    a list without TLS 1.3 suites cannot negotiate TLS 1.3); listing some is refused by name."""
    tls13 = [c for c in s.cipher_suites if c in TLS13_SUITES]
    tls12 = [_openssl_name(c) for c in s.cipher_suites if c not in TLS13_SUITES]
    if tls13 and set(tls13) != TLS13_SUITES:
        raise InvalidConfigError(f"{s.where}: ssl.cipher.suites names {', '.join(tls13)} but not every TLS 1.3 "
                                 f"suite ({', '.join(sorted(TLS13_SUITES))}): Python's ssl enables all or none")
    if not tls13:
        if ctx.minimum_version == ssl.TLSVersion.TLSv1_3:
            raise InvalidConfigError(f"{s.where}: ssl.cipher.suites names no TLS 1.3 suite but "
                                     "ssl.enabled.protocols allows only TLSv1.3")
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise InvalidConfigError(f"{s.where}: ssl.cipher.suites={','.join(s.cipher_suites)}: OpenSSL knows "
                                     "none of these TLS 1.2 suites") from None
        known = {c["name"] for c in ctx.get_ciphers()}
        unknown = [orig for orig, name in zip([c for c in s.cipher_suites if c not in TLS13_SUITES], tls12,
                                              strict=True) if name not in known]
        if unknown:
            raise InvalidConfigError(f"{s.where}: ssl.cipher.suites: OpenSSL does not offer {', '.join(unknown)}")
    elif ctx.maximum_version == ssl.TLSVersion.TLSv1_3:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # only TLS 1.3 suites listed: TLS 1.2 cannot be negotiated
    else:
        raise InvalidConfigError(f"{s.where}: ssl.cipher.suites lists only TLS 1.3 suites but TLSv1.3 is not enabled")


_IANA = re.compile(r"^TLS_(?P<kx>[A-Z0-9_]+?)_WITH_(?P<cipher>AES_(?:128|256)_GCM|CHACHA20_POLY1305|"
                   r"AES_(?:128|256)_CBC)_(?P<mac>SHA(?:256|384)?)$")


def _openssl_name(name: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256 (OpenSSL's naming of the common
    ECDHE/DHE suites); any other name is passed to OpenSSL as given."""
    m = _IANA.match(name)
    if not m:
        return name
    kx = {"ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA", "DHE_RSA": "DHE-RSA", "RSA": ""}.get(m["kx"])
    if kx is None:
        return name
    cipher = m["cipher"]
    if cipher == "CHACHA20_POLY1305":
        core = "CHACHA20-POLY1305"
    else:
        bits, mode = cipher.split("_")[1:]
        core = f"AES{bits}-{mode}" if mode == "GCM" else f"AES{bits}"
    mac = m["mac"]
    suffix = "" if cipher == "CHACHA20_POLY1305" else ("-" + ("SHA" if mac == "SHA" else mac))
    return "-".join(p for p in (kx, core) if p) + suffix


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    """The certificate chain and private key, from whichever form the settings give."""
    kind = s.keystore_type
    if s.keystore_certificate_chain or s.keystore_key:
        if kind != "PEM" or not (s.keystore_certificate_chain and s.keystore_key):
            raise InvalidConfigError(f"{s.where}: ssl.keystore.certificate.chain and ssl.keystore.key go together, "
                                     "with ssl.keystore.type=PEM")
        if s.keystore_location:
            raise InvalidConfigError(f"{s.where}: set ssl.keystore.location or ssl.keystore.certificate.chain, "
                                     "not both")
        with _pem_files(s.keystore_certificate_chain.encode(), s.keystore_key.encode()) as (cert, key):
            _load_chain(ctx, s, cert, key, s.key_password or None)
        return
    path = _existing(s.keystore_location, "ssl.keystore.location", s)
    if kind == "PEM":
        key_file = _existing(s.key_location, "ssl.key.location", s) if s.key_location else None
        _load_chain(ctx, s, path, key_file, s.key_password or None)
        return
    data = _pkcs12_bytes(path, "ssl.keystore", s)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        p12_key, p12_cert, extra = pkcs12.load_key_and_certificates(
            data, (s.keystore_password or s.key_password).encode() or None)
    except ValueError as exc:
        raise InvalidConfigError(f"{s.where}: cannot read the PKCS12 keystore {path} (ssl.keystore.location, "
                                 f"ssl.keystore.password): {exc}") from None
    if p12_key is None or p12_cert is None:
        raise InvalidConfigError(f"{s.where}: the keystore {path} (ssl.keystore.location) holds no private key "
                                 "with its certificate")
    secret = secrets.token_hex(16)
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (p12_cert, *extra))
    key_pem = p12_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(secret.encode()))
    with _pem_files(chain, key_pem) as (cert_file, key_file):
        _load_chain(ctx, s, cert_file, key_file, secret)


def _load_chain(ctx: ssl.SSLContext, s: TlsSettings, cert: str, key: str | None, password: str | None) -> None:
    try:
        ctx.load_cert_chain(cert, key, password=password or "")
    except ssl.SSLError as exc:
        raise InvalidConfigError(f"{s.where}: cannot load the keystore ({s.keystore_location or 'inline PEM'}, "
                                 f"ssl.keystore.type={s.keystore_type}): {exc.reason or exc} (is ssl.key.password "
                                 "right?)") from None


def _load_trust(ctx: ssl.SSLContext, s: TlsSettings, purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH) -> None:
    """The CAs peers' certificates must chain to; without a truststore, the system's (Java's cacerts)."""
    if s.truststore_certificates:
        if s.truststore_type != "PEM":
            raise InvalidConfigError(f"{s.where}: ssl.truststore.certificates needs ssl.truststore.type=PEM")
        _load_cadata(ctx, s, s.truststore_certificates)
        return
    if not s.truststore_location:
        ctx.load_default_certs(purpose)
        return
    path = _existing(s.truststore_location, "ssl.truststore.location", s)
    if s.truststore_type == "PEM":
        _load_cadata(ctx, s, Path(path).read_text())
        return
    data = _pkcs12_bytes(path, "ssl.truststore", s)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        store = pkcs12.load_pkcs12(data, s.truststore_password.encode() or None)
    except ValueError as exc:
        raise InvalidConfigError(f"{s.where}: cannot read the PKCS12 truststore {path} (ssl.truststore.location, "
                                 f"ssl.truststore.password): {exc}") from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not certs:
        raise InvalidConfigError(f"{s.where}: the truststore {path} (ssl.truststore.location) holds no certificate")
    _load_cadata(ctx, s, "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))


def _load_cadata(ctx: ssl.SSLContext, s: TlsSettings, pem: str) -> None:
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise InvalidConfigError(f"{s.where}: the truststore is not PEM certificates: {exc}") from None


def _existing(path: str, key: str, s: TlsSettings) -> str:
    if not os.path.isfile(path):
        raise InvalidConfigError(f"{s.where}: {key}={path}: no such file")
    return path


def _pkcs12_bytes(path: str, prefix: str, s: TlsSettings) -> bytes:
    """The store's bytes; a JKS file (Java's own format) is refused with the command that converts it."""
    data = Path(path).read_bytes()
    if data[:4] == _JKS_MAGIC:
        raise InvalidConfigError(
            f"{s.where}: {path} ({prefix}.location) is a JKS keystore, which kafkalite cannot read: convert it "
            f"with keytool -importkeystore -srckeystore {path} -destkeystore store.p12 -deststoretype PKCS12 and "
            f"set {prefix}.type=PKCS12")
    return data


@contextmanager
def _pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """OpenSSL loads keys from files only: a private directory (0700) that is removed at once."""
    with tempfile.TemporaryDirectory(prefix="kafkalite-tls-") as d:
        paths = []
        for name, data in (("chain.pem", cert), ("key.pem", key)):
            p = os.path.join(d, name)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths.append(p)
        yield paths[0], paths[1]


def peer_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """`User:<subject DN>` of a verified client certificate (Kafka's DEFAULT mapping: X500Principal's RFC 2253
    name), None when the peer sent none."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
