#!/usr/bin/env bash
# Build the control plane binary: build.sh OUTPUT. The version stamped in is the release in go.mod, so
# kubectl and the API server's own compatibility checks see v1.34.x rather than a development build.
set -euo pipefail
cd "$(dirname "$0")"
out=$1
version=$(sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' go.mod)
major=${version#v}; major=${major%%.*}
minor=${version#v$major.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
go build -trimpath -ldflags="$ldflags" -o "$out.tmp" .
mv "$out.tmp" "$out"
