#!/usr/bin/env bash
# Copy the public captures bundled with the demo from the shared capture collection.
set -euo pipefail
src="${1:-$(dirname "$0")/../../tests/data/captures}"
dst="$(dirname "$0")"
cp "$src/deepflow/00-produce-v9.pcap" "$src/deepflow/01-fetch-v12-ok.pcap" \
   "$src/deepflow/11-join-group-v7.pcap" "$src/deepflow/18-api-versions-v3.pcap" "$dst/"
cp "$src/iggy/rs.pcapng" "$dst/iggy-rs.pcapng"
