#!/usr/bin/env bash
# k8s/build.sh - build a pinned local Kubernetes control plane from the Go module proxy.
#
# Builds kube-apiserver, kube-scheduler and kubectl (module k8s.io/kubernetes) and the etcd
# server (module go.etcd.io/etcd/server/v3) into var/k8s/<K8S_VERSION>/bin/ (ignored by git).
# Versions are pinned in k8s/versions.env only.  Nothing of Kubernetes' source is committed:
# k8s/tools/{kubernetes,etcd}/go.mod are small wrapper modules whose `tool` directives name the
# commands; k8s.io/kubernetes replaces its k8s.io/* staging modules with ./staging paths, so the
# wrapper replaces each of them with the published k8s.io/<name> v0.<minor>.<patch> instead.
#
#   k8s/build.sh                 build what is missing, reuse what is there (second run: no-op)
#   k8s/build.sh --update        regenerate k8s/tools/*/go.mod and go.sum from versions.env
#   k8s/build.sh --print-bin-dir print the bin directory and exit
#
# Environment: GO (go command; default `go` on PATH, else /usr/local/go/bin/go),
#              K8S_BUILD_JOBS (go build -p, default 2).  GOMODCACHE/GOCACHE are left at the
#              go defaults so later runs reuse the downloaded modules and compiled packages.
# Output: one line per binary on stdout ("built ..." or "reused ..."); progress and timings on
# stderr; a non-zero exit with a "k8s/build.sh: error: ..." line on failure.
set -euo pipefail

K8S_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$K8S_DIR")
# shellcheck source=versions.env
source "$K8S_DIR/versions.env"
: "${K8S_VERSION:?is not set in k8s/versions.env}" "${ETCD_VERSION:?is not set in k8s/versions.env}"

BIN_DIR="$ROOT/var/k8s/$K8S_VERSION/bin"
K8S_MOD="$K8S_DIR/tools/kubernetes"
ETCD_MOD="$K8S_DIR/tools/etcd"
K8S_CMDS=(kube-apiserver kube-scheduler kubectl)
ETCD_PKG=go.etcd.io/etcd/server/v3           # package main of the etcd server (server/main.go)
JOBS="${K8S_BUILD_JOBS:-2}"
# Bump RECIPE when the build flags below change, so existing binaries are rebuilt.
RECIPE="r2 CGO_ENABLED=0 -trimpath -ldflags=-s,-w"

die() { printf 'k8s/build.sh: error: %s\n' "$*" >&2; exit 1; }
note() { printf 'k8s/build.sh: %s\n' "$*" >&2; }
rel() { printf '%s' "${1#"$ROOT"/}"; }

case "${1:-}" in
  "") MODE=build ;;
  --update) MODE=update ;;
  --print-bin-dir) printf '%s\n' "$BIN_DIR"; exit 0 ;;
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
  || die "K8S_VERSION='$K8S_VERSION' in k8s/versions.env is not a release like v1.37.2"
K8S_MINOR=${BASH_REMATCH[1]}
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"   # k8s.io/api etc. for v1.X.Y

# Stamp written next to each binary: what it was built from.  If it matches, the binary is
# reused without running the go command at all (keeps the second run well under a second).
stamp_of() { # <name> <wrapper module dir> <module version>
  local sum
  sum=$(cat "$2/go.mod" "$2/go.sum" 2>/dev/null | sha256sum) || sum=none
  printf '%s %s %s %s\n' "$1" "$3" "${sum:0:16}" "$RECIPE"
}
is_current() { # <name> <wrapper dir> <version>
  [[ -x "$BIN_DIR/$1" && -f "$BIN_DIR/.$1.stamp" ]] \
    && [[ "$(cat "$BIN_DIR/.$1.stamp")" == "$(stamp_of "$@")" ]]
}

if [[ $MODE == build ]]; then
  todo_k8s=() todo_etcd=()
  for c in "${K8S_CMDS[@]}"; do is_current "$c" "$K8S_MOD" "$K8S_VERSION" || todo_k8s+=("$c"); done
  is_current etcd "$ETCD_MOD" "$ETCD_VERSION" || todo_etcd=(etcd)
  if (( ${#todo_k8s[@]} + ${#todo_etcd[@]} == 0 )); then
    for c in "${K8S_CMDS[@]}"; do printf 'reused %-14s %s  %s\n' "$c" "$K8S_VERSION" "$(rel "$BIN_DIR/$c")"; done
    printf 'reused %-14s %s  %s\n' etcd "$ETCD_VERSION" "$(rel "$BIN_DIR/etcd")"
    exit 0
  fi
fi

# ---- from here on the go command is needed -------------------------------------------------
if [[ -z "${GO:-}" ]]; then
  GO=$(command -v go 2>/dev/null || true)
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
fi
[[ -x "$GO" ]] || die "no Go toolchain at '$GO' (set GO=/path/to/bin/go; go >= 1.26 is needed)"
export GOWORK=off GO111MODULE=on CGO_ENABLED=0
# Never switch toolchains silently: a too-old Go fails with go's own "requires go >= ..." line.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The wrapper go.mod/go.sum are committed and tidy, so builds use -mod=readonly: they can
# neither change the committed files nor pick other versions.  --update uses -mod=mod.
export GOFLAGS="-mod=readonly -buildvcs=false"

mkdir -p "$ROOT/var/k8s"
if command -v flock >/dev/null; then   # serialise concurrent runs (e.g. two CI jobs)
  exec 9>"$ROOT/var/k8s/.build.lock"
  flock 9
fi

gomod_go_line() { awk '$1=="go"{print $2; exit}' "$1"; }

update() {
  local t0=$SECONDS json upmod upgo staging n
  export GOFLAGS="-mod=mod -buildvcs=false"
  note "resolving k8s.io/kubernetes@$K8S_VERSION from the module proxy (downloads its source zip) ..."
  json=$(cd "$K8S_DIR" && "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION") \
    || die "go mod download k8s.io/kubernetes@$K8S_VERSION failed: $(sed -n 's/.*"Error": "\(.*\)".*/\1/p' <<<"$json")"
  upmod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -f "$upmod" ]] || die "could not locate the go.mod of k8s.io/kubernetes@$K8S_VERSION"
  upgo=$(gomod_go_line "$upmod")
  # Staging modules = those replaced with ./staging/... AND required (as v0.0.0) by kubernetes.
  # (sample-cli-plugin/sample-controller are replaced but not required, and not on the proxy.)
  staging=$(comm -12 \
    <(awk '$2=="=>" && $3 ~ /^\.\/staging\// {print $1}' "$upmod" | sort -u) \
    <(awk '$1 ~ /^k8s\.io\// && $2=="v0.0.0" {print $1}' "$upmod" | sort -u))
  n=$(wc -l <<<"$staging")
  (( n > 10 )) || die "found only $n staging modules in $upmod; its layout changed?"
  {
    echo "// Code generated by k8s/build.sh --update from k8s/versions.env; DO NOT EDIT."
    echo "// Wrapper module that builds commands of k8s.io/kubernetes $K8S_VERSION from the Go module proxy."
    echo
    echo "module ebcloud.local/k8s/tools/kubernetes"
    echo
    echo "go $upgo"
    echo
    # godebug settings apply only in the main module; copy kubernetes' own (single line or block).
    awk '/^godebug \(/{b=1} b||/^godebug /{print} b&&/^\)/{b=0}' "$upmod"
    echo
    echo "tool ("
    for c in "${K8S_CMDS[@]}"; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$c"; done
    echo ")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "// k8s.io/kubernetes' go.mod replaces these with ./staging/src/k8s.io/<name>; use the published"
    echo "// copies of the same release ($STAGING_VERSION) instead."
    echo "replace ("
    while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done <<<"$staging"
    echo ")"
  } >"$K8S_MOD/go.mod.new"
  mv "$K8S_MOD/go.mod.new" "$K8S_MOD/go.mod"
  : >"$K8S_MOD/go.sum"
  note "tidying k8s/tools/kubernetes ($n staging replacements -> $STAGING_VERSION) ..."
  (cd "$K8S_MOD" && "$GO" mod tidy) || die "go mod tidy failed in k8s/tools/kubernetes"

  note "resolving $ETCD_PKG@$ETCD_VERSION ..."
  json=$(cd "$K8S_DIR" && "$GO" mod download -json "$ETCD_PKG@$ETCD_VERSION") \
    || die "go mod download $ETCD_PKG@$ETCD_VERSION failed: $(sed -n 's/.*"Error": "\(.*\)".*/\1/p' <<<"$json")"
  upmod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  {
    echo "// Code generated by k8s/build.sh --update from k8s/versions.env; DO NOT EDIT."
    echo "// Wrapper module that builds the etcd server $ETCD_VERSION from the Go module proxy."
    echo
    echo "module ebcloud.local/k8s/tools/etcd"
    echo
    echo "go $(gomod_go_line "$upmod")"
    echo
    echo "tool $ETCD_PKG"
    echo
    echo "require $ETCD_PKG $ETCD_VERSION"
  } >"$ETCD_MOD/go.mod.new"
  mv "$ETCD_MOD/go.mod.new" "$ETCD_MOD/go.mod"
  : >"$ETCD_MOD/go.sum"
  note "tidying k8s/tools/etcd ..."
  (cd "$ETCD_MOD" && "$GO" mod tidy) || die "go mod tidy failed in k8s/tools/etcd"
  note "updated k8s/tools/kubernetes and k8s/tools/etcd in $((SECONDS - t0))s; commit their go.mod and go.sum"
}

if [[ $MODE == update ]]; then update; exit 0; fi

# ---- build ----------------------------------------------------------------------------------
pins() { awk -v m="$1" -v v="$2" '($1==m && $2==v) || ($1=="require" && $2==m && $3==v) {f=1} END {exit !f}' "$3" 2>/dev/null; }
pins k8s.io/kubernetes "$K8S_VERSION" "$K8S_MOD/go.mod" \
  || die "k8s/tools/kubernetes/go.mod does not pin k8s.io/kubernetes $K8S_VERSION (versions.env changed?); run: k8s/build.sh --update"
pins "$ETCD_PKG" "$ETCD_VERSION" "$ETCD_MOD/go.mod" \
  || die "k8s/tools/etcd/go.mod does not pin $ETCD_PKG $ETCD_VERSION (versions.env changed?); run: k8s/build.sh --update"

mkdir -p "$BIN_DIR"
TMP=$(mktemp -d "$BIN_DIR/../.build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

fmt_size() { awk -v b="$(stat -c %s "$1")" 'BEGIN{printf "%.1f MiB", b/1048576}'; }

# go_build <wrapper dir> <ldflags> <-o target> <pkg>...  - fetch modules, then compile
go_build() {
  local dir=$1 ld=$2 out=$3 t0=$SECONDS; shift 3
  note "fetching modules for $* ..."
  (cd "$dir" && "$GO" list -deps -f '' "$@" >/dev/null) \
    || die "fetching/loading modules failed in $(rel "$dir") (is the Go module proxy reachable? GOPROXY=$("$GO" env GOPROXY))"
  note "modules ready in $((SECONDS - t0))s; compiling with -p $JOBS ..."
  t0=$SECONDS
  (cd "$dir" && "$GO" build -p "$JOBS" -trimpath -ldflags="$ld" -o "$out" "$@") \
    || die "go build failed in $(rel "$dir"): (cd $(rel "$dir") && go build -trimpath -ldflags='$ld' $*)"
  note "compiled in $((SECONDS - t0))s"
}
install_bin() { # <name> <wrapper dir> <version>
  mv -f "$TMP/$1" "$BIN_DIR/$1"
  stamp_of "$@" >"$BIN_DIR/.$1.stamp"
  printf 'built  %-14s %s  %s  (%s)\n' "$1" "$3" "$(rel "$BIN_DIR/$1")" "$(fmt_size "$BIN_DIR/$1")"
}
report_reused() { printf 'reused %-14s %s  %s\n' "$1" "$2" "$(rel "$BIN_DIR/$1")"; }

# Re-check under the lock: a concurrent run may have built them meanwhile.
todo_k8s=() todo_etcd=()
for c in "${K8S_CMDS[@]}"; do is_current "$c" "$K8S_MOD" "$K8S_VERSION" || todo_k8s+=("$c"); done
is_current etcd "$ETCD_MOD" "$ETCD_VERSION" || todo_etcd=(etcd)

if (( ${#todo_k8s[@]} )); then
  # Same version stamping as Kubernetes' hack/lib/version.sh (without the git commit, which the
  # module zip does not carry); the build date is the proxy's timestamp of the release.
  date=$(cd "$K8S_MOD" && "$GO" list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes) \
    || die "cannot resolve k8s.io/kubernetes in k8s/tools/kubernetes"
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=${date:-1970-01-01T00:00:00Z} -X $p.gitCommit="
  done
  pkgs=()
  for c in "${todo_k8s[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  go_build "$K8S_MOD" "$ld" "$TMP/" "${pkgs[@]}"
fi
if (( ${#todo_etcd[@]} )); then
  go_build "$ETCD_MOD" "-s -w" "$TMP/etcd" "$ETCD_PKG"
fi
for c in "${K8S_CMDS[@]}"; do
  if [[ -e "$TMP/$c" ]]; then install_bin "$c" "$K8S_MOD" "$K8S_VERSION"; else report_reused "$c" "$K8S_VERSION"; fi
done
if [[ -e "$TMP/etcd" ]]; then install_bin etcd "$ETCD_MOD" "$ETCD_VERSION"; else report_reused etcd "$ETCD_VERSION"; fi
