"""Keys and certificates made at test time with ``openssl`` (and the JDK's ``keytool``) for TLS tests: a CA, a
server certificate naming the node's address, a keystore the server reads, a client certificate for mutual TLS,
and a truststore of the CA for the server to check client certificates against."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PASSWORD = "changeit-test"


@dataclass(frozen=True)
class PKI:
    ca_cert: Path
    ca_key: Path
    server_keystore: Path  # PKCS#12: the server's key and certificate
    truststore: Path  # JKS: the CA, for checking client certificates
    client_cert: Path
    client_key: Path
    root: Path

    def certificate(self, name: str, subject_alt_name: str) -> tuple[Path, Path]:
        """Another (certificate, key) signed by this CA, naming ``subject_alt_name`` (``IP:1.2.3.4``)."""
        return _signed(self.root, name, self.ca_cert, self.ca_key, subject_alt_name)


def _run(*args: str | Path) -> None:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {result.stderr.strip()}")


def make_ca(root: Path, name: str = "ca") -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    key, cert = root / f"{name}.key", root / f"{name}.pem"
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
         "-subj", f"/CN=splitsource test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def _signed(root: Path, name: str, ca_cert: Path, ca_key: Path, subject_alt_name: str) -> tuple[Path, Path]:
    key, csr, cert, ext = (root / f"{name}.key", root / f"{name}.csr", root / f"{name}.pem", root / f"{name}.ext")
    ext.write_text(f"subjectAltName={subject_alt_name}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    _run("openssl", "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "2", "-extfile", ext)
    return cert, key


def make_pki(root: Path, server_address: str) -> PKI:
    """A CA, a server certificate for ``server_address`` (an IP) in a PKCS#12 keystore, a client certificate, and
    a JKS truststore of the CA."""
    ca_cert, ca_key = make_ca(root)
    server_cert, server_key = _signed(root, "server", ca_cert, ca_key, f"IP:{server_address}")
    keystore = root / "server.p12"
    _run("openssl", "pkcs12", "-export", "-in", server_cert, "-inkey", server_key, "-certfile", ca_cert,
         "-name", "server", "-out", keystore, "-passout", f"pass:{PASSWORD}")
    client_cert, client_key = _signed(root, "client", ca_cert, ca_key, "DNS:splitsource-client")
    truststore = root / "truststore.jks"
    keytool = shutil.which("keytool") or "keytool"
    _run(keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", ca_cert, "-keystore", truststore,
         "-storetype", "JKS", "-storepass", PASSWORD)
    return PKI(ca_cert, ca_key, keystore, truststore, client_cert, client_key, root)
