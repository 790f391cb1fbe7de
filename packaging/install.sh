#!/bin/sh
# Installs the deeplearning agent from this tarball on Amazon Linux (or any
# systemd Linux without dpkg): the `agent` and `trainer` binaries into
# /usr/bin, the agent's unit into /usr/lib/systemd/system, enabled (started
# at boot once /etc/deeplearning/node.json exists), and uninstall.sh into
# /usr/lib/deeplearning-agent.
#
#   sudo ./install.sh               install on this machine
#   ./install.sh --root DIR         install under DIR (an image being built, a test root)
#
# Re-running it replaces the files (an upgrade). Exit 1 with the reason on failure.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=/
while [ $# -gt 0 ]; do
  case $1 in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[ -d "$root" ] || { echo "install.sh: $root is not a directory" >&2; exit 1; }
root=${root%/}

for f in bin/agent bin/trainer deeplearning-agent.service uninstall.sh; do
  [ -f "$here/$f" ] || { echo "install.sh: $here/$f is missing: unpack the whole tarball and run its install.sh" >&2; exit 1; }
done

# Each file goes to a temporary name first and is renamed over the old one,
# so a re-run (an upgrade on a running node) never leaves a half-written binary.
put() { # mode source destination
  install -d -m 0755 "$(dirname "$3")"
  install -m "$1" "$2" "$3.new"
  mv -f "$3.new" "$3"
}
put 0755 "$here/bin/agent" "$root/usr/bin/agent"
put 0755 "$here/bin/trainer" "$root/usr/bin/trainer"
put 0644 "$here/deeplearning-agent.service" "$root/usr/lib/systemd/system/deeplearning-agent.service"
put 0755 "$here/uninstall.sh" "$root/usr/lib/deeplearning-agent/uninstall.sh"
install -d -m 0755 "$root/etc/deeplearning"

# Enabled, not started: it starts at boot, or from the user data, once the
# node config exists (the unit's ConditionPathExists).
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable deeplearning-agent.service
elif command -v systemctl >/dev/null 2>&1; then
  systemctl --root="${root:-/}" enable deeplearning-agent.service
else
  # What `systemctl enable` does for WantedBy=multi-user.target.
  install -d -m 0755 "$root/etc/systemd/system/multi-user.target.wants"
  ln -sf /usr/lib/systemd/system/deeplearning-agent.service \
    "$root/etc/systemd/system/multi-user.target.wants/deeplearning-agent.service"
fi
echo "installed: $("$here/bin/agent" --version), $("$here/bin/trainer" --version) under ${root:-/}"
