#!/usr/bin/env bash
# Build the endpoint picker: build.sh OUTPUT. The picker is the upstream one, at the release go.mod pins.
set -euo pipefail
cd "$(dirname "$0")"
go build -trimpath -ldflags="-s -w" -o "$1.tmp" .
mv "$1.tmp" "$1"
