#!/usr/bin/env bash
# Build the CRD checker: build.sh OUTPUT [MINOR]. Without MINOR it links the apiextensions-apiserver pinned in
# go.mod (the release the project's control plane runs); with MINOR it builds the same source against the
# module of kube-MINOR/ (its own go.mod and go.sum), in a scratch copy. The version linked is stamped in.
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
version=$(sed -n 's/^\tk8s.io\/apiextensions-apiserver \(v[0-9.]*\)$/\1/p' "$src/go.mod")
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
cd "$src"
go build -trimpath -ldflags="-s -w -X main.release=$version" -o "$out.tmp" .
mv "$out.tmp" "$out"
