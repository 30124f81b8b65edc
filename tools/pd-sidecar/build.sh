#!/usr/bin/env bash
# Build llm-d's P/D sidecar, the proxy in front of a decode engine that sends each request to the prefill
# engine its x-prefiller-host-port header names first: build.sh OUTPUT. The program is the upstream
# cmd/pd-sidecar of the release go.mod pins (a tool of this module), not a copy; its version is stamped in.
set -euo pipefail
cd "$(dirname "$0")"
module=github.com/llm-d/llm-d-inference-scheduler
version=$(go list -m -f '{{.Version}}' "$module")
ldflags="-s -w -X $module/pkg/sidecar/version.BuildRef=$version"
go build -trimpath -ldflags="$ldflags" -o "$1.tmp" "$module/cmd/pd-sidecar"
mv "$1.tmp" "$1"
