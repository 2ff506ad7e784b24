#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed yet (apt-get, as
# root or through sudo). Prints what it installs on stderr, prefixed by $LOOM_INSTALL_TAG.
#
#   bash scripts/install_packages.sh PACKAGE...
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "${LOOM_INSTALL_TAG:-install}: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
