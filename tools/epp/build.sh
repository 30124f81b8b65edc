#!/usr/bin/env bash
# Build the endpoint picker and, next to it, the body-based router with the prompt-length classifier:
# build.sh OUTPUT writes OUTPUT (the picker) and OUTPUT's directory/classifier. Both are the upstream
# programs at the release go.mod pins; the classifier only adds a plugin (classify/).
set -euo pipefail
cd "$(dirname "$0")"
# Static binaries (no C library), so the picker image needs nothing but them; GOOS/GOARCH from the caller
# cross-compile (images/picker/Dockerfile runs this script for each target architecture).
export CGO_ENABLED=0
classifier="$(dirname "$1")/classifier"
go build -trimpath -ldflags="-s -w" -o "$classifier.tmp" ./classifier
go build -trimpath -ldflags="-s -w" -o "$1.tmp" .
mv "$classifier.tmp" "$classifier"
mv "$1.tmp" "$1"
