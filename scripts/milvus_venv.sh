#!/usr/bin/env bash
# Creates (idempotently) the separate venv for the real-Milvus tools: PyPI `milvus` 2.3.5 (the
# embedded standalone server) and pymilvus 2.3.5. They pin grpcio 1.58 and need marshmallow<4,
# which clash with the project venv, so they live apart in .dev/milvus-venv.
# Usage: scripts/milvus_venv.sh [VENV_DIR]; prints the venv's python path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${MILVUS_VENV:-.dev/milvus-venv}}"
pins=(milvus==2.3.5 pymilvus==2.3.5 'marshmallow<4')
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.metadata as m
assert m.version("milvus") == "2.3.5" and m.version("pymilvus") == "2.3.5"
assert int(m.version("marshmallow").split(".")[0]) < 4
import milvus, pymilvus  # noqa: F401
PY
then
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q "${pins[@]}" >&2
fi
echo "$(cd "$venv" && pwd)/bin/python"
