"""Why an outgoing connection failed, when only the operator can fix it: a certificate the truststore does not
trust, a certificate that does not name the host, a client certificate the peer refuses, a listener that speaks
another protocol, a SASL login the peer refuses. Retrying cures none of these, so they are logged at ERROR with the
setting that fixes them, once per peer and cause (Kafka's clients log the handshake failure on the connecting
side likewise), rather than as a reconnect line every second; refused and reset connections, timeouts and the
like are left to the caller's retries."""

from __future__ import annotations

import logging
import ssl

from kafkalite.errors import SaslAuthenticationError

# OpenSSL's X509_V_ERR codes (x509_vfy.h) for an untrusted chain, a wrong name and a certificate out of date
_UNTRUSTED = frozenset({2, 18, 19, 20, 21, 27})
_NAME_MISMATCH = frozenset({62, 64})
_OUT_OF_DATE = frozenset({9, 10})
# TLS alerts the peer sends when it refuses this side's client certificate
_REFUSED_CLIENT_CERT = frozenset({"TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE",
                                  "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV13_ALERT_CERTIFICATE_REQUIRED",
                                  "SSLV3_ALERT_CERTIFICATE_EXPIRED", "TLSV1_ALERT_ACCESS_DENIED"})
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE", "HTTP_REQUEST",
                      "UNKNOWN_PROTOCOL"})


def operator_fix(exc: BaseException, peer: str, host: str) -> str | None:
    """The cause of a failed connection to `peer` (e.g. "broker 2", "itself") at `host` and what fixes it, when
    only configuration can; None when retrying may (refused, reset, timed out)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = getattr(exc, "verify_code", None)
        reason = getattr(exc, "verify_message", None) or str(exc)
        if code in _UNTRUSTED:
            fix = f"set ssl.truststore.location to a file that holds the CA that signed {peer}'s certificate"
        elif code in _NAME_MISMATCH:
            fix = (f"{peer}'s certificate does not name {host}: put {host} in its subjectAltName, or advertise a "
                   "host name the certificate holds (advertised.listeners)")
        elif code in _OUT_OF_DATE:
            fix = f"renew {peer}'s certificate (or check this machine's clock)"
        else:
            fix = f"check ssl.truststore.location and {peer}'s certificate"
        return f"certificate verify failed: {reason}; {fix}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if reason in _REFUSED_CLIENT_CERT:
            return (f"{peer} refused this broker's certificate ({reason}): set ssl.keystore.location to a certificate "
                    f"signed by a CA that {peer}'s truststore holds")
        if reason in _NOT_TLS:
            return (f"{peer} does not speak TLS at {host} ({reason}): the listener's security protocol differs "
                    "(listener.security.protocol.map, security.inter.broker.protocol)")
        return f"TLS handshake failed: {reason}"
    if isinstance(exc, SaslAuthenticationError):
        return (f"SASL login failed: {exc}; check sasl.mechanism.inter.broker.protocol against {peer}'s "
                "sasl.enabled.mechanisms and the inter-broker credentials in sasl.jaas.config")
    return None


class FailureLog:
    """ERROR once per peer and cause; a peer reached again may fail loudly again."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._said: dict[str, str] = {}

    def failed(self, peer_key: str, what: str, exc: BaseException, peer: str, host: str) -> bool:
        """Log `what` ("broker 1 cannot reach broker 2 over SSL at h:p") with its cause and fix at ERROR, the
        first time this cause is seen for `peer_key`; whether the failure is one only the operator can fix."""
        fix = operator_fix(exc, peer, host)
        if fix is None:
            return False
        if self._said.get(peer_key) != fix:
            self._said[peer_key] = fix
            self.logger.error("%s: %s", what, fix)
        return True

    def reached(self, peer_key: str) -> None:
        self._said.pop(peer_key, None)
