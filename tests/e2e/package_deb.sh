#!/usr/bin/env bash
# The Debian package end to end, without touching this machine's root:
#   1. cpack builds BUILD/packages/neuron_<version>_amd64.deb; its Depends name
#      the libraries the binary links (dpkg-shlibdeps) and adduser;
#   2. systemd-analyze verify passes on the packaged unit (with ExecStart
#      pointing at the built binary, which it checks), with no warning;
#   3. dpkg --root installs it into a temporary root whose package database is
#      a copy of this machine's (so dpkg checks Depends against the libraries
#      the installed binary will load) and the maintainer scripts run with
#      DPKG_ROOT set (no user or service touched on the host);
#   4. the installed /usr/bin/neuron, with the installed config, answers
#      /health with the bundled model loaded; dpkg -r and -P remove it all.
# Usage: package_deb.sh BUILD_DIR SOURCE_DIR. Skips (77) without cpack, dpkg-shlibdeps or systemd-analyze.
set -u
build="$1"; src="$2"
for tool in cpack dpkg-deb dpkg-shlibdeps systemd-analyze curl; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed (scripts/install-deps.sh installs it)"; exit 77; }
done
work="$(mktemp -d /tmp/neuron-e2e-deb-XXXXXX)"
daemon=""
cleanup() {
  [ -n "$daemon" ] && kill -TERM "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "FAIL $*"; [ -f "$work/serve.log" ] && tail -n 30 "$work/serve.log"; exit 1; }
pass() { echo "PASS $*"; }

# 1. the package
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
[ -n "$version" ] || die "no CPACK_PACKAGE_VERSION in $build/CPackConfig.cmake"
(cd "$build" && cpack --config CPackConfig.cmake -B "$build/packages" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; die "cpack"; }
deb="$build/packages/neuron_${version}_amd64.deb"
[ -f "$deb" ] || die "cpack wrote no $deb: $(ls "$build/packages")"
pass "cpack wrote $(basename "$deb") ($(du -h "$deb" | cut -f1))"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libc6 libstdc++6 libopenblas0 libcurl4 libgloo libpcre2-8-0 libutf8proc2 adduser; do
  case "$depends" in *"$lib"*) ;; *) die "Depends lacks $lib: $depends" ;; esac
done
pass "Depends names the linked libraries and adduser"
dpkg-deb -c "$deb" >"$work/contents"
for f in ./usr/bin/neuron ./usr/lib/systemd/system/neuron.service ./etc/neuron/config.json \
         ./usr/share/neuron/models/qwen3-tiny-a/model.safetensors ./usr/share/doc/neuron/README.md; do
  grep -q " $f\$" "$work/contents" || die "the package lacks $f"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -tf - | grep -q conffiles || die "no conffiles"
pass "the package holds the binary, the unit, the config (a conffile), the bundled model and the README"

# 2. the unit
mkdir -p "$work/unit"
dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/lib/systemd/system/neuron.service | sed "s|/usr/bin/neuron|$build/neuron|" >"$work/unit/neuron.service"
grep -q '^Type=notify$' "$work/unit/neuron.service" && grep -q '^WatchdogSec=' "$work/unit/neuron.service" &&
  grep -q '^LimitNOFILE=65536$' "$work/unit/neuron.service" && grep -q '^User=neuron$' "$work/unit/neuron.service" ||
  die "the unit lacks Type=notify, WatchdogSec, LimitNOFILE or User=neuron"
out=$(systemd-analyze verify "$work/unit/neuron.service" 2>&1); rc=$?
[ $rc = 0 ] && [ -z "$out" ] || die "systemd-analyze verify (status $rc): $out"
pass "systemd-analyze verify: no error, no warning"

# 3. dpkg --root
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
cp /var/lib/dpkg/status "$root/var/lib/dpkg/status"
touch "$root/var/lib/dpkg/available"
dpkg --root="$root" --force-script-chrootless --log=/dev/null -i "$deb" >"$work/dpkg.log" 2>&1 ||
  { grep -v "files list file for package" "$work/dpkg.log"; die "dpkg -i"; }
dpkg --root="$root" -s neuron 2>/dev/null | grep -q '^Status: install ok installed' || die "dpkg does not list neuron as installed"
[ -x "$root/usr/bin/neuron" ] && [ -f "$root/etc/neuron/config.json" ] || die "files missing after dpkg -i"
pass "dpkg --root -i: installed, Depends satisfied by this machine's packages"

# 4. the installed binary with the installed config (a free port instead of 13131)
"$root/usr/bin/neuron" serve --config "$root/etc/neuron/config.json" --port 0 >"$work/serve.log" 2>&1 &
daemon=$!
port=""
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://[^ ]*' "$work/serve.log" | head -n1 | sed 's/.*://')
  [ -n "$port" ] && break
  kill -0 "$daemon" 2>/dev/null || die "the installed daemon exited at startup"
  sleep 0.1
done
[ -n "$port" ] || die "the installed daemon did not listen"
health=""
for _ in $(seq 1 300); do
  health=$(curl -s "http://127.0.0.1:$port/health")
  case "$health" in *'"activation":{'*'"state":"ready"'*) break ;; esac
  sleep 0.1
done
case "$health" in *'"id":"qwen3-tiny-a"'*'"state":"loaded"'*) ;; *) die "/health of the installed daemon: $health" ;; esac
grep -q "share/neuron/models/qwen3-tiny-a" "$work/serve.log" || die "the installed daemon did not serve the installed model"
curl -s "http://127.0.0.1:$port/" | grep -q '/ui/main.js' || die "the installed daemon serves no web UI"
pass "the installed daemon answers /health with the installed model loaded, and the web UI"
kill -TERM "$daemon"; wait "$daemon"; status=$?; daemon=""
[ "$status" = 0 ] || die "the installed daemon exited with status $status after SIGTERM"

dpkg --root="$root" --force-script-chrootless --log=/dev/null -r neuron >>"$work/dpkg.log" 2>&1 || die "dpkg -r"
[ ! -e "$root/usr/bin/neuron" ] && [ -f "$root/etc/neuron/config.json" ] || die "dpkg -r must remove the binary and keep the conffile"
dpkg --root="$root" --force-script-chrootless --log=/dev/null -P neuron >>"$work/dpkg.log" 2>&1 || die "dpkg -P"
[ ! -e "$root/etc/neuron/config.json" ] || die "dpkg -P must remove the config"
pass "dpkg -r keeps the config, dpkg -P removes it"
