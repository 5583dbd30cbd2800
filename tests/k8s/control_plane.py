"""A real Kubernetes control plane for the tests: etcd + kube-apiserver (+ kube-scheduler), built
by k8s/build.sh at the versions pinned in k8s/versions.env, started on free loopback ports with
freshly generated certificates and an admin token (envtest's idea; the nodes have no kubelet:
`pools.providers.fake_kubelet` plays it, KWOK's idea). Nothing here downloads anything."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pinned_versions() -> dict[str, str]:
    versions = {}
    for line in (ROOT / "k8s" / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            versions[key.strip()] = value.strip()
    return versions


def binaries_dir() -> Path:
    return ROOT / "var" / "k8s" / pinned_versions()["K8S_VERSION"] / "bin"


def missing_binaries() -> list[str]:
    return [name for name in ("etcd", "kube-apiserver", "kube-scheduler", "kubectl") if not (binaries_dir() / name).is_file()]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _post(url: str, body: dict) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass
class ControlPlane:
    """Start with `start()`, stop with `stop()`; `kubeconfig` is the admin's."""

    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ebcloud-k8s-")))
    bin: Path = field(default_factory=binaries_dir)
    token: str = field(default_factory=lambda: secrets.token_hex(24))
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.etcd_port, self.peer_port, self.api_port, self.scheduler_port = free_ports(4)
        self.kubeconfig = self.work / "kubeconfig"
        self.server = f"https://127.0.0.1:{self.api_port}"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, *, scheduler: bool = True, scheduler_config: Path | None = None) -> ControlPlane:
        try:
            self._certificates()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            if scheduler:
                self.start_scheduler(config=scheduler_config)
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self._terminate(name)
        shutil.rmtree(self.work, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port and etcd (watches break meanwhile)."""
        self._terminate("kube-apiserver")
        self._start_apiserver()

    def start_scheduler(self, *, config: Path | None = None) -> None:
        if "kube-scheduler" in self.processes:
            self._terminate("kube-scheduler")
        args = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.scheduler_port}",
            f"--cert-dir={self.work / 'scheduler-certs'}",
        ]
        args += [f"--config={config}"] if config else ["--leader-elect=false"]
        self._spawn("kube-scheduler", args)
        self._wait(f"https://127.0.0.1:{self.scheduler_port}/healthz", "kube-scheduler", auth=False)

    # -- parts ----------------------------------------------------------------------------------

    def _certificates(self) -> None:
        w = self.work
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                 "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=ebcloud-test-ca", cwd=w)  # fmt: skip
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", "apiserver.key", "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=w)  # fmt: skip
        (w / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "san.ext", "-out", "apiserver.crt", cwd=w)  # fmt: skip
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=w)
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=w)
        (w / "tokens.csv").write_text(f'{self.token},test-admin,test-admin-uid,"system:masters"\n')

    def _start_etcd(self) -> None:
        self._spawn("etcd", [
            "--name=test", f"--data-dir={self.work / 'etcd-data'}", "--log-level=warn", "--unsafe-no-fsync",
            f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}", f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{self.peer_port}", f"--initial-advertise-peer-urls=http://127.0.0.1:{self.peer_port}",
            f"--initial-cluster=test=http://127.0.0.1:{self.peer_port}",
        ])  # fmt: skip
        self._wait(f"http://127.0.0.1:{self.etcd_port}/health", "etcd", auth=False, expect=b'"health":"true"')

    def _start_apiserver(self) -> None:
        w = self.work
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            f"--cert-dir={w / 'apiserver-certs'}", f"--tls-cert-file={w / 'apiserver.crt'}",
            f"--tls-private-key-file={w / 'apiserver.key'}", f"--client-ca-file={w / 'ca.crt'}",
            f"--token-auth-file={w / 'tokens.csv'}", "--authorization-mode=RBAC", "--anonymous-auth=false",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}", "--service-cluster-ip-range=10.0.0.0/24",
            "--profiling=false", "--endpoint-reconciler-type=none",  # a loopback address cannot be an endpoint
        ])  # fmt: skip
        self._wait(f"{self.server}/readyz", "kube-apiserver", auth=True, timeout=120)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now, as the API server does every few minutes: a watch
        from an older resourceVersion is then answered 410 Gone (once the API server's watch
        cache no longer holds it). The revision compacted to."""
        url = f"http://127.0.0.1:{self.etcd_port}/v3"
        head = json.loads(_post(f"{url}/kv/range", {"key": "Lw=="}))  # key "/"
        revision = int(head["header"]["revision"])
        _post(f"{url}/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def etcd_put(self, key: str, document: dict) -> None:
        """Store an object straight into etcd under `key` (such as
        /registry/priorityclasses/NAME), as JSON, which kube-apiserver's storage reads as well as
        its own protobuf: past admission, for a state only a race of the API's own checks makes
        (two globalDefault PriorityClasses), made here at will. The API server's watch of etcd
        then serves it like any other object."""
        encoded = {name: base64.b64encode(value.encode()).decode() for name, value in (("key", key), ("value", json.dumps(document)))}
        _post(f"http://127.0.0.1:{self.etcd_port}/v3/kv/put", encoded)

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig with a fresh token of that ServiceAccount (`kubectl create token`: the
        TokenRequest API, as a pod running as the account would hold one)."""
        result = self.kubectl("create", "token", name, "-n", namespace, "--duration=2h")
        if result.returncode != 0:
            raise RuntimeError(f"token for {namespace}/{name}: {result.stderr.strip()}")
        path = self.work / f"kubeconfig-{namespace}-{name}"
        self._write_kubeconfig(path, user=name, token=result.stdout.strip())
        return path

    def _write_kubeconfig(self, path: Path | None = None, *, user: str = "admin", token: str = "") -> None:
        (path or self.kubeconfig).write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: test\n  cluster:\n    server: {self.server}\n    certificate-authority: {self.work / 'ca.crt'}\n"
            f"users:\n- name: {user}\n  user:\n    token: {token or self.token}\n"
            f"contexts:\n- name: test\n  context:\n    cluster: test\n    user: {user}\n"
            "current-context: test\n"
        )

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=60)  # fmt: skip

    # -- processes ------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        self.processes[name] = subprocess.Popen(
            [str(self.bin / name), *args], cwd=self.work, stdout=log, stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", "")},
        )  # fmt: skip

    def _terminate(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.work / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _wait(self, url: str, name: str, *, auth: bool, expect: bytes = b"ok", timeout: float = 60) -> None:
        context = ssl.create_default_context(cafile=str(self.work / "ca.crt")) if auth else ssl._create_unverified_context()  # noqa: S323 (the scheduler's self-signed health port)
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} exited ({self.processes[name].returncode}):\n{self.log_tail(name)}")
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2, context=context) as response:
                    if expect in response.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name} not ready at {url} after {timeout}s:\n{self.log_tail(name)}")
