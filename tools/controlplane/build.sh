#!/usr/bin/env bash
# Build the control plane binary: build.sh OUTPUT [MINOR]. Without MINOR it builds the release pinned in go.mod;
# with MINOR the same sources against kube-MINOR/go.mod and go.sum (that release's k8s.io/kubernetes, its
# staging modules and the etcd server it pins), in a scratch copy. The version stamped in is the release built,
# so kubectl and the API server's own compatibility checks see v1.MINOR.x rather than a development build.
set -euo pipefail
cd "$(dirname "$0")"
out=$1
minor=${2:-}
src=$PWD
if [ -n "$minor" ]; then
  [ -f "kube-$minor/go.mod" ] || { echo "no module for Kubernetes $minor (kube-$minor/go.mod)" >&2; exit 2; }
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  cp ./*.go "kube-$minor/go.mod" "kube-$minor/go.sum" "$src/"
fi
version=$(sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$src/go.mod")
major=${version#v}; major=${major%%.*}
minor=${version#v$major.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
cd "$src"
# providerless: without the in-tree cloud providers (1.30 still links them, and Google's compute API clients
# are most of their build time); the control plane runs no cloud provider either way.
go build -tags providerless -trimpath -ldflags="$ldflags" -o "$out.tmp" .
mv "$out.tmp" "$out"
