#!/usr/bin/env bash
# Creates (idempotently) the separate venv for the real-Milvus tools: PyPI `milvus` 2.3.5 (the
# embedded standalone server) and pymilvus 2.3.5. They pin grpcio 1.58 and need marshmallow<4,
# which clash with the project venv, so they live apart in .dev/milvus-venv.
# Usage: scripts/milvus_venv.sh [VENV_DIR [MILVUS_VERSION]]; prints the venv's python path on stdout.
# MILVUS_VERSION (default 2.3.5) picks another 2.3.x server wheel, for the cross-version restore
# tests (`make milvus-other-venv`: 2.3.3; the registry has Linux wheels of 2.3.0-2.3.5 only:
# 2.3.8 and 2.3.9 are macOS arm64 wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${MILVUS_VENV:-.dev/milvus-venv}}"
version="${2:-2.3.5}"
[[ "$version" =~ ^2\.3\.[0-9]+$ ]] || { echo "milvus_venv.sh: version $version is not a 2.3.x" >&2; exit 2; }
pins=(milvus=="$version" pymilvus==2.3.5 'marshmallow<4')
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! WANT="$version" "$venv/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as m
import os
assert m.version("milvus") == os.environ["WANT"] and m.version("pymilvus") == "2.3.5"
assert int(m.version("marshmallow").split(".")[0]) < 4
import milvus, pymilvus  # noqa: F401
PY
then
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q "${pins[@]}" >&2
fi
echo "$(cd "$venv" && pwd)/bin/python"
