#!/usr/bin/env bash
# make demo: the disaster-recovery drill on local defaults. Starts a 3-member
# etcd 3.5 cluster with mutual TLS and a MinIO server on loopback, writes v3
# and v2 data, takes a backup, inspects the cluster, kills two members
# (quorum lost), restores a new 3-member cluster from the newest snapshot (the
# survivor's), verifies it and re-injects the v2 keys. No cloud account needed.
# Everything lives in demo-data/ and is stopped on exit. It installs nothing
# and needs no root: `make demo` builds etcd 3.5 and MinIO into the test-server cache (scripts/servers-dir.sh)
# (scripts/test-servers.sh etcd35 minio) and the tool into bin/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/test-servers.env"
S="$("$ROOT/scripts/servers-dir.sh")"
ETCD="$S/etcd-$ETCD35_VERSION/etcd"
ETCDCTL="$S/etcd-$ETCD35_VERSION/etcdctl"
MINIO="$S/minio-$MINIO_VERSION/minio"
TOOL="$ROOT/bin/etcd-recovery"
D="$ROOT/demo-data"
# Below 15000: outside the range the test harness hands out, so a demo and a
# test run never collide.
BASE_PORT="${DEMO_BASE_PORT:-12379}"

for t in curl openssl; do
  command -v "$t" >/dev/null || { echo "demo: needs $t (apt-get install $t)" >&2; exit 1; }
done
for b in "$ETCD" "$ETCDCTL" "$MINIO" "$TOOL"; do
  [[ -x "$b" ]] || { echo "demo: missing $b: run make demo (it builds them)" >&2; exit 1; }
done

# Servers run in the background, disowned: bash then prints no job-control
# "Killed" lines when the demo kills them. stop SIGNAL PID... waits until
# each is gone (bash still reaps them).
pids=()
started() { pids+=("$1"); disown "$1"; }
stop() {
  local sig="$1" p; shift
  kill -s "$sig" "$@" 2>/dev/null || true
  for p in "$@"; do
    for _ in $(seq 1 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  done
}
cleanup() { [[ ${#pids[@]} -eq 0 ]] || stop TERM "${pids[@]}"; }
trap cleanup EXIT
rm -rf "$D"; mkdir -p "$D/pki"
# Bold headings on a terminal only: piped or logged output has no escapes.
if [[ -t 1 ]]; then
  step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  step() { printf '\n== %s\n' "$*"; }
fi
# wait_for WHAT CMD...: runs CMD until it succeeds, for up to 20 s.
wait_for() {
  local what="$1"; shift
  for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "demo: $what not ready after 20s (logs in $D)" >&2
  return 1
}

step "PKI: a CA, a server/peer certificate for 127.0.0.1, a client certificate"
(
  cd "$D/pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=demo-ca" \
    -keyout ca.key -out ca.crt 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=etcd" -keyout server.key -out server.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.crt 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=etcd-recovery" -keyout client.key -out client.csr 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext -out client.crt 2>/dev/null
)

step "etcd: 3 members, mutual TLS, v2 enabled (legacy calico data)"
cluster=""; endpoints=""
for i in 0 1 2; do
  cp=$((BASE_PORT + i * 10)); pp=$((cp + 1))
  cluster+="${cluster:+,}m$i=https://127.0.0.1:$pp"
  endpoints+="${endpoints:+,}https://127.0.0.1:$cp"
done
for i in 0 1 2; do
  cp=$((BASE_PORT + i * 10)); pp=$((cp + 1))
  "$ETCD" --name "m$i" --data-dir "$D/m$i" \
    --listen-client-urls "https://127.0.0.1:$cp" --advertise-client-urls "https://127.0.0.1:$cp" \
    --listen-peer-urls "https://127.0.0.1:$pp" --initial-advertise-peer-urls "https://127.0.0.1:$pp" \
    --initial-cluster "$cluster" --initial-cluster-token demo --enable-v2 \
    --cert-file "$D/pki/server.crt" --key-file "$D/pki/server.key" --trusted-ca-file "$D/pki/ca.crt" --client-cert-auth \
    --peer-cert-file "$D/pki/server.crt" --peer-key-file "$D/pki/server.key" --peer-trusted-ca-file "$D/pki/ca.crt" --peer-client-cert-auth \
    --log-level warn >"$D/m$i.log" 2>&1 &
  started $!
done

step "MinIO: an S3 server on loopback"
# Throwaway local credentials, passed by environment, never argv.
export MINIO_ROOT_USER="demo-$RANDOM$RANDOM" MINIO_ROOT_PASSWORD="demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
"$MINIO" server "$D/minio" --address "127.0.0.1:$((BASE_PORT + 100))" --console-address "127.0.0.1:$((BASE_PORT + 101))" --quiet >"$D/minio.log" 2>&1 &
started $!

export ETCDCTL_ENDPOINTS="$endpoints" ETCDCTL_CACERT="$D/pki/ca.crt" ETCDCTL_CERT="$D/pki/client.crt" ETCDCTL_KEY="$D/pki/client.key"
export COS_ENDPOINT="http://127.0.0.1:$((BASE_PORT + 100))" COS_REGION=us-east-1 COS_BUCKET=etcd-backups COS_PREFIX=kubx-etcd-01
export COS_ACCESS_KEY_ID="$MINIO_ROOT_USER" COS_SECRET_ACCESS_KEY="$MINIO_ROOT_PASSWORD"

wait_for "etcd (3 members)" "$ETCDCTL" endpoint health
wait_for "MinIO" curl -fs "$COS_ENDPOINT/minio/health/ready"
"$ETCDCTL" endpoint status -w simple
curlcfg="$D/curl.cfg"; printf 'user = "%s:%s"\n' "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >"$curlcfg"; chmod 600 "$curlcfg"
curl -fs -K "$curlcfg" --aws-sigv4 "aws:amz:us-east-1:s3" -X PUT "$COS_ENDPOINT/$COS_BUCKET" >/dev/null

step "data: 2,000 v3 keys and 20 v2 keys"
for i in $(seq 1 20); do
  curl -fs --cacert "$D/pki/ca.crt" --cert "$D/pki/client.crt" --key "$D/pki/client.key" \
    -X PUT "https://127.0.0.1:$BASE_PORT/v2/keys/calico/v1/host/node$i/config" -d value="ip=10.0.0.$i" >/dev/null
done
# v3: 20 transactions of 100 puts (etcd allows 128 operations per txn).
# etcdctl txn reads compares, a blank line, the success ops, a blank line,
# the failure ops and a blank line; no compares, so the puts always apply.
# A failed txn stops the demo with etcdctl's error.
load_start=$SECONDS
for b in $(seq 0 19); do
  {
    echo
    for i in $(seq $((b * 100 + 1)) $((b * 100 + 100))); do
      printf 'put /registry/pods/default/pod-%d "{\\"uid\\":\\"%s\\"}"\n' "$i" "$RANDOM-$RANDOM-$i"
    done
    echo; echo
  } | "$ETCDCTL" txn >/dev/null || { echo "demo: etcdctl txn (keys $((b * 100 + 1))-$((b * 100 + 100))) failed" >&2; exit 1; }
done
keys=$("$ETCDCTL" get /registry/pods/default/ --prefix --count-only -w fields | sed -n 's/^"Count" : //p')
[[ "$keys" == 2000 ]] || { echo "demo: loaded $keys v3 keys, want 2000" >&2; exit 1; }
echo "loaded 2000 v3 keys in 20 etcdctl txn calls ($((SECONDS - load_start))s)"

CLUSTER=demo-1927b9f56bc841c2
# A drill runs etcd-<minor> of the backup's version (the image ships
# etcd-3.5 and etcd-3.6): here the demo's own etcd 3.5.
mkdir -p "$D/drill-bin" && ln -sf "$ETCD" "$D/drill-bin/etcd-3.5"
export ETCD_RECOVERY_ETCD_BIN_DIR="$D/drill-bin"
step "backup + restore drill: etcd-recovery backup --cluster-id $CLUSTER --kind scheduled --drill"
"$TOOL" backup --cluster-id "$CLUSTER" --kind scheduled --drill

step "inspect: health, quorum, backup freshness (exit 0 = HEALTHY)"
"$TOOL" inspect --cluster-id "$CLUSTER" --probe-timeout 2s || echo "(inspect exit $?)"

step "disaster: two of three members die"
stop KILL "${pids[0]}" "${pids[1]}"
"$TOOL" inspect --cluster-id "$CLUSTER" --probe-timeout 2s || echo "(inspect exit $? = QUORUM LOST)"

step "survivor snapshot: back up the one member left (the seed runbook's lone-pod case)"
"$TOOL" backup --cluster-id "$CLUSTER" --kind manual --probe-timeout 2s

step "list: etcd-recovery list --cluster-id $CLUSTER"
"$TOOL" list --cluster-id "$CLUSTER"

# The new cluster: three members on new ports, built from the newest snapshot.
newcluster=""; newendpoints=""
for i in 0 1 2; do
  cp=$((BASE_PORT + 200 + i * 10)); pp=$((cp + 1))
  newcluster+="${newcluster:+,}n$i=https://127.0.0.1:$pp"
  newendpoints+="${newendpoints:+,}https://127.0.0.1:$cp"
done

step "restore --dry-run: the plan, and nothing changes"
"$TOOL" restore --cluster-id "$CLUSTER" --endpoints "https://127.0.0.1:$((BASE_PORT + 20))" \
  --initial-cluster "$newcluster" --initial-cluster-token demo-restored --data-dir-root "$D/restored" --dry-run

step "restore: survivor snapshot first (kind pre-restore), then rebuild the data dirs from the newest snapshot"
"$TOOL" restore --cluster-id "$CLUSTER" --endpoints "https://127.0.0.1:$((BASE_PORT + 20))" \
  --initial-cluster "$newcluster" --initial-cluster-token demo-restored --data-dir-root "$D/restored"
stop KILL "${pids[2]}"   # the old survivor is retired

step "start the new cluster on the restored data dirs"
for i in 0 1 2; do
  cp=$((BASE_PORT + 200 + i * 10)); pp=$((cp + 1))
  "$ETCD" --name "n$i" --data-dir "$D/restored/n$i.etcd" \
    --listen-client-urls "https://127.0.0.1:$cp" --advertise-client-urls "https://127.0.0.1:$cp" \
    --listen-peer-urls "https://127.0.0.1:$pp" --initial-advertise-peer-urls "https://127.0.0.1:$pp" \
    --initial-cluster "$newcluster" --initial-cluster-token demo-restored --enable-v2 \
    --cert-file "$D/pki/server.crt" --key-file "$D/pki/server.key" --trusted-ca-file "$D/pki/ca.crt" --client-cert-auth \
    --peer-cert-file "$D/pki/server.crt" --peer-key-file "$D/pki/server.key" --peer-trusted-ca-file "$D/pki/ca.crt" --peer-client-cert-auth \
    --log-level warn >"$D/n$i.log" 2>&1 &
  started $!
done
export ETCDCTL_ENDPOINTS="$newendpoints"
wait_for "the restored etcd (3 members)" "$ETCDCTL" endpoint health
newest=$("$TOOL" list --cluster-id "$CLUSTER" -o json | grep -m1 '"name"' | cut -d'"' -f4)

step "restore verify: healthy, revision not gone back, every live key there (backup $newest)"
"$TOOL" restore verify --endpoints "$newendpoints" --cluster-id "$CLUSTER" --backup "$newest" --expect-members 3

step "restore v2: the legacy calico keys, twice (the second run changes nothing)"
"$TOOL" restore v2 --cluster-id "$CLUSTER" --backup "$newest" --endpoints "$newendpoints"
"$TOOL" restore v2 --cluster-id "$CLUSTER" --backup "$newest" --endpoints "$newendpoints"

step "inspect the rebuilt cluster"
"$TOOL" inspect --cluster-id "$CLUSTER" --probe-timeout 2s || echo "(inspect exit $?)"
"$ETCDCTL" get /registry --prefix --count-only -w fields | grep -i count
echo
echo "demo: done. Data, logs and certificates are in $D (servers are stopped now)."
