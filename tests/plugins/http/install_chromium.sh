#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for the dashboard's browser test
# (tests/plugins/http/test_dashboard_browser.py) when they are missing: no browser download,
# only the distribution's packages. Needs root and apt-get; without them it says so and the
# test is skipped, naming the packages. Idempotent; used by `make test`.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "warning: chromium and chromium-driver are not installed (as root: apt-get install chromium chromium-driver); the dashboard's browser test will be skipped" >&2
  exit 0
fi
echo "installing chromium and chromium-driver (Debian packages) for the dashboard's browser test…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
