#!/usr/bin/env bash
# k8s/smoke.sh - prove the binaries from k8s/build.sh run as a control plane.
#
# Starts etcd on a free loopback port with a temporary data dir, then kube-apiserver against it
# with freshly generated certificates (openssl: a CA, a serving cert for 127.0.0.1, a
# service-account key pair) and a static admin token in group system:masters, RBAC on.  Waits for
# /readyz, writes a kubeconfig, runs `kubectl get --raw /version` and `kubectl create namespace
# smoke`, starts kube-scheduler, checks its /healthz, and has it bind a pod that asks for one
# nvidia.com/gpu to a fake 8-GPU node (there is no kubelet: the Node object is all there is).
# Then stops everything it started and removes the temporary directory.
#
#   k8s/smoke.sh          (needs: the binaries in var/k8s/<version>/bin, openssl, curl, python3)
#   KEEP=1 k8s/smoke.sh   keep the temporary directory (logs, certs, kubeconfig) for inspection
set -euo pipefail

K8S_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$K8S_DIR/versions.env"
BIN=$(dirname "$K8S_DIR")/var/k8s/$K8S_VERSION/bin
T0=$(date +%s.%N)

die() { printf 'k8s/smoke.sh: FAIL: %s\n' "$*" >&2; exit 1; }
say() { printf 'k8s/smoke.sh: [%5.1fs] %s\n' "$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" "$*"; }
for b in etcd kube-apiserver kube-scheduler kubectl; do
  [[ -x "$BIN/$b" ]] || die "$BIN/$b is missing; run k8s/build.sh first"
done
for t in openssl curl python3; do command -v "$t" >/dev/null || die "'$t' is not installed"; done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/k8s-smoke.XXXXXX")
PIDS=()
cleanup() {
  local rc=$? pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do    # stop in reverse start order
    pid=${PIDS[i]}
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if (( rc != 0 )); then
    for f in "$WORK"/*.log; do
      [[ -f $f ]] || continue
      echo "----- last lines of $(basename "$f") -----" >&2; tail -n 25 "$f" >&2
    done
  fi
  if [[ -n "${KEEP:-}" ]]; then echo "k8s/smoke.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Free loopback ports, chosen by the kernel (bound together, so they are distinct).
read -r ETCD_PORT PEER_PORT API_PORT SCHED_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# ---- certificates and credentials ------------------------------------------------------------
cd "$WORK"
{
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -keyout ca.key -out ca.crt -subj "/CN=smoke-ca"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >san.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile san.ext -out apiserver.crt
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
  openssl pkey -in sa.key -pubout -out sa.pub
} >openssl.log 2>&1 || die "openssl failed: $(tail -n 3 openssl.log)"
TOKEN=$(openssl rand -hex 24)
echo "$TOKEN,smoke-admin,smoke-admin-uid,\"system:masters\"" >tokens.csv
say "certificates and token generated in $WORK"

# ---- etcd -----------------------------------------------------------------------------------
t=$(date +%s.%N)
"$BIN/etcd" --name smoke --data-dir "$WORK/etcd-data" --log-level warn --unsafe-no-fsync \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "smoke=http://127.0.0.1:$PEER_PORT" >etcd.log 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do
  curl -fsS "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"' && break
  kill -0 "${PIDS[0]}" 2>/dev/null || die "etcd exited"
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"' || die "etcd not healthy after 20s"
say "etcd $("$BIN/etcd" --version | awk '/etcd Version/{print $3}') healthy on 127.0.0.1:$ETCD_PORT after $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"

# ---- kube-apiserver ----
# --endpoint-reconciler-type none: the reconciler of the default/kubernetes Endpoints refuses a
# loopback advertise address ("may not be in the loopback range"), and nothing here needs it.-----------------------------------------------------------------------
t=$(date +%s.%N)
"$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --endpoint-reconciler-type none \
  --cert-dir "$WORK/apiserver-certs" --tls-cert-file apiserver.crt --tls-private-key-file apiserver.key \
  --client-ca-file ca.crt \
  --token-auth-file tokens.csv --authorization-mode RBAC --anonymous-auth=false \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file sa.pub --service-account-signing-key-file sa.key \
  --service-cluster-ip-range 10.0.0.0/24 \
  --profiling=false >apiserver.log 2>&1 &
PIDS+=($!)
ready=""
for _ in $(seq 600); do
  if curl -fsS --cacert ca.crt -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz" 2>/dev/null | grep -qx ok; then
    ready=1; break
  fi
  kill -0 "${PIDS[1]}" 2>/dev/null || die "kube-apiserver exited"
  sleep 0.1
done
[[ -n $ready ]] || die "kube-apiserver not ready after 60s: $(curl -sS --cacert ca.crt -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz?verbose" 2>&1 | grep -v '\[+\]' | head -n 5)"
say "kube-apiserver ready on https://127.0.0.1:$API_PORT (start-to-ready $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s)"

# ---- kubeconfig + kubectl ---------------------------------------------------------------------
export KUBECONFIG="$WORK/kubeconfig"
K() { "$BIN/kubectl" "$@"; }
K config set-cluster smoke --server "https://127.0.0.1:$API_PORT" --certificate-authority ca.crt --embed-certs >/dev/null
K config set-credentials smoke-admin --token "$TOKEN" >/dev/null
K config set-context smoke --cluster smoke --user smoke-admin >/dev/null
K config use-context smoke >/dev/null
version=$(K get --raw /version) || die "kubectl get --raw /version failed"
say "kubectl get --raw /version: $(tr -d ' \n' <<<"$version")"
grep -q "\"gitVersion\": \"$K8S_VERSION\"" <<<"$version" || die "server reports a version other than $K8S_VERSION"
say "$(K version 2>&1 | tr '\n' ' ')"
say "$(K create namespace smoke)"
[[ "$(K get namespace smoke -o jsonpath='{.status.phase}')" == Active ]] || die "namespace smoke is not Active"
say "kubectl auth can-i '*' '*' as the token user: $(K auth can-i '*' '*')"

# ---- kube-scheduler ---------------------------------------------------------------------------
t=$(date +%s.%N)
"$BIN/kube-scheduler" --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$WORK/scheduler-certs" \
  --leader-elect=false >scheduler.log 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do
  [[ "$(curl -ksS "https://127.0.0.1:$SCHED_PORT/healthz" 2>/dev/null)" == ok ]] && break
  kill -0 "${PIDS[2]}" 2>/dev/null || die "kube-scheduler exited"
  sleep 0.1
done
[[ "$(curl -ksS "https://127.0.0.1:$SCHED_PORT/healthz" 2>&1)" == ok ]] || die "kube-scheduler /healthz not ok after 30s"
say "kube-scheduler /healthz ok on 127.0.0.1:$SCHED_PORT after $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"

# A fake GPU node (no kubelet) and a pod asking for one GPU: the scheduler must bind it there.
K apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: fake-gpu-0
  labels: {kubernetes.io/hostname: fake-gpu-0, smoke: "true"}
EOF
K patch node fake-gpu-0 --subresource=status --type=merge -p \
  '{"status":{"capacity":{"cpu":"32","memory":"256Gi","pods":"110","nvidia.com/gpu":"8"},"allocatable":{"cpu":"32","memory":"256Gi","pods":"110","nvidia.com/gpu":"8"},"conditions":[{"type":"Ready","status":"True","reason":"Smoke","message":"fake node"}]}}' >/dev/null
# The TaintNodesByCondition admission plugin gives every new Node the not-ready taint; the node
# lifecycle controller (kube-controller-manager, not run here) would lift it once Ready=True.
K taint node fake-gpu-0 node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
[[ -z "$(K get node fake-gpu-0 -o jsonpath='{.spec.taints}')" ]] || die "fake-gpu-0 still has taints: $(K get node fake-gpu-0 -o jsonpath='{.spec.taints}')"
K -n smoke create serviceaccount default >/dev/null 2>&1 || true   # normally made by kube-controller-manager
t=$(date +%s.%N)
K -n smoke apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: gpu-job}
spec:
  automountServiceAccountToken: false
  containers:
  - name: main
    image: registry.invalid/never-pulled:0
    resources: {limits: {nvidia.com/gpu: "1"}}
EOF
K -n smoke wait pod/gpu-job --for=jsonpath='{.spec.nodeName}'=fake-gpu-0 --timeout=30s >/dev/null \
  || die "pod smoke/gpu-job was not scheduled: $(K -n smoke get pod gpu-job -o jsonpath='{.status.conditions}')"
say "kube-scheduler bound smoke/gpu-job to fake-gpu-0 in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"
say "PASS (kubernetes $K8S_VERSION, etcd $ETCD_VERSION); stopping"
