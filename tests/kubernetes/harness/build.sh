#!/usr/bin/env bash
# Build (once per version) the binaries of the local Kubernetes test control plane:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, ray-operator,
#   procnode (our virtual-kubelet provider: process nodes that run pods as processes),
#   kueue (the Kueue controller; started only by the tests that ask for it),
#   helm (installs deploy/helm/raylab in the chart's tests)
# plus KubeRay's CRD YAMLs, next to ray-operator, Kueue's manifests (CRDs, RBAC,
# webhooks, visibility APIService, default config) under config/components/, next to kueue,
# and the prometheus-operator's ServiceMonitor CRD (nothing built: the chart's optional
# ServiceMonitor is validated against it) under prometheus-operator-<version>/.
#
# Versions come from the wrapper modules' go.mod files in ./go/<component>/ (the single
# source of truth; controlplane.py reads the same files). procnode is our own code: its
# version is virtual-kubelet's plus a hash of its sources, so any edit rebuilds it. Everything is cached under
#   ${RAYLAB_CACHE:-$HOME/.cache/raylab}/k8s-bin/<component>-<version>/
# with the Go module and build caches under the same root, so a warm run only checks
# that the files exist, and a version bump rebuilds incrementally.
#
# Usage: build.sh            build what is missing
#        build.sh --force    rebuild everything
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${RAYLAB_CACHE:-$HOME/.cache/raylab}"
BIN_ROOT="$CACHE_ROOT/k8s-bin"
FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

# Version of MODULE as required by the go.mod in DIR (works for both the one-line and the
# block form of `require`).
module_version() {
  awk -v m="$1" '{ for (i = 1; i < NF; i++) if ($i == m) { print $(i + 1); exit } }' "$2/go.mod"
}

ETCD_MOD=go.etcd.io/etcd/server/v3
K8S_MOD=k8s.io/kubernetes
KWOK_MOD=sigs.k8s.io/kwok
KUBERAY_MOD=github.com/ray-project/kuberay/ray-operator
KUEUE_MOD=sigs.k8s.io/kueue
HELM_MOD=helm.sh/helm/v4
PROMOP_MOD=github.com/prometheus-operator/prometheus-operator
ETCD_VERSION="$(module_version "$ETCD_MOD" "$HERE/go/etcd")"
K8S_VERSION="$(module_version "$K8S_MOD" "$HERE/go/kubernetes")"
KWOK_VERSION="$(module_version "$KWOK_MOD" "$HERE/go/kwok")"
KUBERAY_VERSION="$(module_version "$KUBERAY_MOD" "$HERE/go/kuberay")"
KUEUE_VERSION="$(module_version "$KUEUE_MOD" "$HERE/go/kueue")"
HELM_VERSION="$(module_version "$HELM_MOD" "$HERE/go/helm")"
PROMOP_VERSION="$(module_version "$PROMOP_MOD" "$HERE/go/prometheus-operator")"
SERVICEMONITOR_CRD=monitoring.coreos.com_servicemonitors.yaml
VK_MOD=github.com/virtual-kubelet/virtual-kubelet
# Same recipe as controlplane.py's procnode_version(): the sorted file names' contents.
procnode_version() {
  local files
  files="$(cd "$HERE/go/procnode" && ls -- *.go go.mod go.sum | LC_ALL=C sort)"
  printf '%s-%s' "$(module_version "$VK_MOD" "$HERE/go/procnode")" \
    "$(cd "$HERE/go/procnode" && cat $files | sha256sum | cut -c1-12)"
}
PROCNODE_VERSION="$(procnode_version)"
CRDS=(ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml)
# Kueue's kustomize inputs that controlplane.py renders itself (no kustomize here).
KUEUE_CONFIG=(crd/bases rbac webhook visibility manager)

# component  version  wrapper-module-dir  package ("-": nothing to build, files only)
COMPONENTS=(
  "etcd $ETCD_VERSION etcd $ETCD_MOD"
  "kube-apiserver $K8S_VERSION kubernetes $K8S_MOD/cmd/kube-apiserver"
  "kube-controller-manager $K8S_VERSION kubernetes $K8S_MOD/cmd/kube-controller-manager"
  "kube-scheduler $K8S_VERSION kubernetes $K8S_MOD/cmd/kube-scheduler"
  "kwok $KWOK_VERSION kwok $KWOK_MOD/cmd/kwok"
  "ray-operator $KUBERAY_VERSION kuberay $KUBERAY_MOD"
  "procnode $PROCNODE_VERSION procnode raylab.test/harness/procnode"
  "kueue $KUEUE_VERSION kueue $KUEUE_MOD/cmd/kueue"
  "helm $HELM_VERSION helm $HELM_MOD/cmd/helm"
  "prometheus-operator $PROMOP_VERSION prometheus-operator -"
)

is_cached() { # component version
  local dir="$BIN_ROOT/$1-$2"
  if [[ "$1" == prometheus-operator ]]; then
    [[ -s "$dir/$SERVICEMONITOR_CRD" ]]
    return
  fi
  [[ -x "$dir/$1" ]] || return 1
  if [[ "$1" == ray-operator ]]; then
    local crd
    for crd in "${CRDS[@]}"; do [[ -s "$dir/$crd" ]] || return 1; done
  fi
  if [[ "$1" == kueue ]]; then
    [[ -s "$dir/config/components/crd/bases/kueue.x-k8s.io_workloads.yaml" ]] || return 1
    [[ -s "$dir/config/components/webhook/manifests.yaml" ]] || return 1
  fi
}

missing=()
for entry in "${COMPONENTS[@]}"; do
  read -r name version _ _ <<<"$entry"
  if [[ $FORCE == 1 ]] || ! is_cached "$name" "$version"; then missing+=("$entry"); fi
done
if [[ ${#missing[@]} == 0 ]]; then
  echo "k8s-bin: all cached under $BIN_ROOT"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: 'go' not found on PATH" >&2; exit 1; }
mkdir -p "$BIN_ROOT"
# Serialise concurrent builds (two pytest sessions, a developer shell) on the same cache.
if command -v flock >/dev/null; then
  exec 9>"$BIN_ROOT/.build.lock"
  flock 9
fi

export GOMODCACHE="$CACHE_ROOT/go/mod"
export GOCACHE="$CACHE_ROOT/go/build"
# -mod=readonly: build exactly what go.mod/go.sum pin, never edit them.
export GOFLAGS="-trimpath -mod=readonly"
export CGO_ENABLED=0
# No DWARF in the compiled packages: the binaries are stripped (-s -w) anyway, and
# writing it costs compile time and build cache (a cold build, 2 cores: see README.md).
GCFLAGS="all=-dwarf=false"

# What hack/lib/version.sh stamps into release builds; without it the components report
# v0.0.0-master and version checks (clients, kwok, the operator) see a bogus server version.
k8s_ldflags() {
  local v="$1" major minor pkg flags="-s -w"
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean"
  done
  printf '%s' "$flags"
}

# Kueue's visibility server (an aggregated API server inside the controller) writes its
# self-signed serving certificate to /visibility, a path its image provides; a process
# node's pods see this machine's file system, of which only /tmp, /home, /run and /mnt
# are the pod's own, so the path is moved under /tmp at link time (a package variable).
# Plus the version its Makefile stamps.
kueue_ldflags() {
  printf '%s' "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$1"
  printf '%s' " -X sigs.k8s.io/kueue/pkg/visibility.certDir=/tmp/kueue-visibility"
}

# What helm's Makefile stamps, so that `helm version` names the module's version (its
# source says only "v4.3").
helm_ldflags() {
  printf '%s' "-s -w -X $HELM_MOD/internal/version.version=$1"
  printf '%s' " -X $HELM_MOD/internal/version.gitTreeState=clean"
}

total_start=$SECONDS
for entry in "${missing[@]}"; do
  read -r name version module pkg <<<"$entry"
  # Another build may have finished it while we waited for the lock.
  if [[ $FORCE == 0 ]] && is_cached "$name" "$version"; then continue; fi
  dest="$BIN_ROOT/$name-$version"
  tmp="$BIN_ROOT/.$name-$version.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  ldflags="-s -w"
  [[ $module == kubernetes ]] && ldflags="$(k8s_ldflags "$version")"
  [[ $name == kueue ]] && ldflags="$(kueue_ldflags "$version")"
  [[ $name == helm ]] && ldflags="$(helm_ldflags "$version")"
  echo "k8s-bin: building $name $version ..."
  start=$SECONDS
  if [[ $pkg != - ]]; then
    (cd "$HERE/go/$module" && go build -gcflags="$GCFLAGS" -ldflags="$ldflags" -o "$tmp/$name" "$pkg")
  fi
  if [[ $name == ray-operator ]]; then
    src="$(cd "$HERE/go/$module" && go list -m -f '{{.Dir}}' "$KUBERAY_MOD")/config/crd/bases"
    for crd in "${CRDS[@]}"; do install -m 0644 "$src/$crd" "$tmp/$crd"; done
  fi
  if [[ $name == kueue ]]; then
    src="$(cd "$HERE/go/$module" && go list -m -f '{{.Dir}}' "$KUEUE_MOD")/config/components"
    for part in "${KUEUE_CONFIG[@]}"; do
      mkdir -p "$tmp/config/components/$part"
      cp -R "$src/$part/." "$tmp/config/components/$part/"
    done
    chmod -R u+w "$tmp/config"  # the module cache's files are read-only
  fi
  if [[ $name == prometheus-operator ]]; then
    # Downloaded, not built: `go list -m` would not fetch a module that no package needs.
    src="$(cd "$HERE/go/$module" && go mod download -json "$PROMOP_MOD" \
      | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
    install -m 0644 "$src/example/prometheus-operator-crd/$SERVICEMONITOR_CRD" "$tmp/"
  fi
  # Swap in atomically so an interrupted build never leaves a half-written cache entry.
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
  echo "k8s-bin: built $name $version in $((SECONDS - start))s -> $dest"
  if [[ $name == procnode ]]; then
    # Each edit of procnode's sources is a new version: drop builds unused for a day
    # (not at once: another checkout's tests may be running one).
    find "$BIN_ROOT" -maxdepth 1 -name 'procnode-*' ! -name "procnode-$version" -mmin +1440 -exec rm -rf {} +
  fi
done
echo "k8s-bin: done in $((SECONDS - total_start))s"
