#!/bin/sh
# Removes what install.sh installed (binaries, unit, this script) and what
# the agent wrote at run time outside shared files.
#
#   sudo /usr/lib/deeplearning-agent/uninstall.sh
#   /usr/lib/deeplearning-agent/uninstall.sh --root DIR
set -eu

root=/
while [ $# -gt 0 ]; do
  case $1 in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    *) echo "uninstall.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
root=${root%/}

if [ -z "$root" ] && [ -d /run/systemd/system ]; then
  systemctl disable --now deeplearning-agent.service || true
else
  rm -f "$root/etc/systemd/system/multi-user.target.wants/deeplearning-agent.service"
fi
rm -f "$root/usr/bin/agent" "$root/usr/bin/trainer" "$root/usr/lib/systemd/system/deeplearning-agent.service" \
  "$root/etc/profile.d/deeplearning.sh"
rm -rf "$root/usr/lib/deeplearning-agent" "$root/etc/deeplearning" "$root/var/lib/deeplearning"
if [ -z "$root" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
echo "deeplearning agent removed from ${root:-/}"
