#!/usr/bin/env bash
# tools/package.sh makes a .deb that lintian finds no error in, that holds the binaries, the
# sandboxed unit, the sample config, man pages and bash completion, and whose unit systemd
# accepts. Nothing is installed on this machine.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

deb=$(bash tools/package.sh --out "$out" --dtraind daemon/dtraind \
        --dtrain-submit submit/dtrain-submit 2>"$out/err") || fail "package.sh: $(cat "$out/err")"
[[ $deb == "$out"/dtrain_*_amd64.deb && -f $deb ]] || fail "no package at $deb"
echo "built $(basename "$deb")"

# The files an ops user expects.
contents=$(dpkg-deb --contents "$deb" | awk '{ print $6 }')
for f in ./usr/bin/dtraind ./usr/bin/dtrain-submit ./lib/systemd/system/dtraind.service \
    ./etc/dtrain/dtraind.yaml ./usr/share/man/man1/dtraind.1.gz \
    ./usr/share/man/man1/dtrain-submit.1.gz ./usr/share/bash-completion/completions/dtraind \
    ./usr/share/bash-completion/completions/dtrain-submit ./usr/share/doc/dtrain/copyright \
    ./usr/share/doc/dtrain/changelog.gz ./usr/lib/sysctl.d/60-dtrain.conf \
    ./usr/share/dtrain/slurm/dtrain.sbatch; do
  grep -qx -- "$f" <<<"$contents" || fail "the package lacks $f; it has:
$contents"
done
echo "contents: every expected file"
info=$(dpkg-deb --field "$deb" Depends Conffiles 2>&1)
[[ $info == *libsodium* && $info == *adduser* ]] || fail "Depends lacks the libraries: $info"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/dtrain/dtraind.yaml ||
  fail "/etc/dtrain/dtraind.yaml is not a conffile (an upgrade would overwrite the operator's)"

# Debian's package checker: no errors (warnings and notes are printed, not fatal).
command -v lintian >/dev/null || fail "lintian is missing (bash tools/setup.sh installs it)"
report=$(lintian --fail-on error "$deb" 2>&1); rc=$?
echo "$report" | grep -v "root privileges"
[[ $rc -eq 0 ]] || fail "lintian reports errors"
echo "lintian: no errors"

# The unit: sandboxed, as the dtrain user, and accepted by systemd-analyze verify (which also
# runs the ExecStart binary's checks: pointed at the packaged one, and its man page found).
x=$out/x
dpkg-deb -x "$deb" "$x"
unit=$x/lib/systemd/system/dtraind.service
for setting in User=dtrain ProtectSystem=strict NoNewPrivileges=yes PrivateTmp=yes \
    "CapabilityBoundingSet=" StateDirectory=dtrain Type=notify SystemCallFilter=@system-service \
    TasksMax=4096 MemoryMax=90%; do
  grep -qx -- "$setting" "$unit" || fail "the unit lacks $setting"
done
sed "s|/usr/bin/dtraind|$x/usr/bin/dtraind|" "$unit" > "$out/dtraind.service"
verify=$(MANPATH=$x/usr/share/man systemd-analyze verify "$out/dtraind.service" 2>&1); rc=$?
[[ $rc -eq 0 && -z $verify ]] || fail "systemd-analyze verify (exit $rc): $verify"
if [[ -d /run/systemd/system ]]; then
  echo "systemd-analyze verify: accepted"
else
  echo "systemd-analyze verify: accepted (systemd is not running here: the unit was checked" \
       "offline, not started)"
fi

# The maintainer scripts parse, and the man pages say what --help says.
for s in postinst postrm; do
  dpkg-deb --ctrl-tarfile "$deb" | tar -xO "./$s" > "$out/$s"
  sh -n "$out/$s" || fail "$s does not parse"
done
zcat "$x/usr/share/man/man1/dtrain-submit.1.gz" | grep -q "dtrain\\\\-submit status" ||
  fail "dtrain-submit's man page lacks its commands"
"$x/usr/bin/dtraind" --help > /dev/null || fail "the packaged dtraind does not run"

# A wrong option is refused with the usage.
bash tools/package.sh --bogus > /dev/null 2>"$out/err"; rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown option '--bogus'" "$out/err" ||
  fail "package.sh --bogus: exit $rc, $(cat "$out/err")"
bash tools/package.sh --out > /dev/null 2>"$out/err"; rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--out needs a value" "$out/err" ||
  fail "package.sh --out without a value: exit $rc, $(cat "$out/err")"
echo "PASS"
