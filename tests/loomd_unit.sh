#!/bin/bash
# The system service as installed: systemd/loomd.service (configured into the build folder)
# scores 2.0 or lower in `systemd-analyze security --offline=true` and passes
# `systemd-analyze verify` (with its commands pointed at this build's loomd); the default
# configuration it names passes `loomd serve --check`; `cmake --install` puts loomd, loomctl,
# the unit, the pipelines, the configuration (keeping an edited one) and the GStreamer plugin
# (found there by gst-inspect-1.0) in place.
# No running systemd is needed. Exits 77 (skipped) without systemd-analyze.
# Usage: loomd_unit.sh BUILD_DIR
set -u
build=$1
fail() { echo "loomd_unit: $*" >&2; exit 1; }
command -v systemd-analyze >/dev/null || { echo "loomd_unit: no systemd-analyze: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

unit="$build/loomd.service"
[[ -f $unit ]] || fail "$unit: not configured"
out=$(systemd-analyze security --offline=true "$unit" 2>&1) || true
score=$(sed -n 's/.*Overall exposure level for loomd.service: \([0-9.]*\).*/\1/p' <<<"$out")
[[ -n $score ]] || fail "systemd-analyze security printed no score: $out"
awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || fail "exposure $score is above 2.0: $out"
echo "loomd_unit: exposure $score"

# verify runs the unit's checks offline; point its commands at this build's binary.
bindir=$(grep -o 'ExecStart=[^ ]*' "$unit" | head -1 | sed 's/ExecStart=//; s|/loomd$||')
sed "s|$bindir/loomd|$(cd "$build" && pwd)/loomd|g" "$unit" >"$dir/loomd.service"
v=$(cd "$dir" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$dir/loomd.service" 2>&1) ||
  fail "systemd-analyze verify: $v"
[[ -z $v ]] || fail "systemd-analyze verify said: $v"

"$build/loomd" serve --check --config "$build/loomd.toml" >"$dir/check.out" 2>&1 ||
  fail "loomd serve --check on the default configuration: $(cat "$dir/check.out")"

DESTDIR="$dir/root" cmake --install "$build" >"$dir/install.out" 2>&1 || fail "cmake --install: $(cat "$dir/install.out")"
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
for f in bin/loomd bin/loomctl lib/systemd/system/loomd.service share/loom/pipelines/restore-x2.toml etc/loom/loomd.toml; do
  [[ -e "$dir/root$prefix/$f" ]] || fail "cmake --install did not put $prefix/$f in place"
done
# The GStreamer plugin, where the build has it: installed, and found there by gst-inspect-1.0
# (not for a sanitized build, whose module only a sanitized program can load).
if [[ -e "$build/gstreamer/libgstloom.so" ]]; then
  plugin=$(find "$dir/root" -name libgstloom.so | head -n 1)
  [[ -n "$plugin" ]] || fail "cmake --install did not install the GStreamer plugin libgstloom.so"
  if ! grep -qE '^LOOM_(SANITIZE|FUZZ):BOOL=ON' "$build/CMakeCache.txt" && command -v gst-inspect-1.0 >/dev/null; then
    GST_REGISTRY="$dir/registry.bin" GST_PLUGIN_PATH="$(dirname "$plugin")" gst-inspect-1.0 loomrestore \
      >"$dir/inspect.out" 2>&1 || fail "gst-inspect-1.0 does not find loomrestore in $plugin: $(cat "$dir/inspect.out")"
  fi
fi
echo "# edited" >>"$dir/root$prefix/etc/loom/loomd.toml"
DESTDIR="$dir/root" cmake --install "$build" >"$dir/install.out" 2>&1 || fail "second cmake --install failed"
[[ $(tail -1 "$dir/root$prefix/etc/loom/loomd.toml") == "# edited" ]] || fail "cmake --install overwrote the configuration"
echo "loomd unit: ok"
