#!/usr/bin/env bash
# Builds the Debian package for cluster nodes: dtrain_VERSION_amd64.deb with dtraind,
# dtrain-submit, the sandboxed systemd unit (runs as the `dtrain` system user), a sample
# /etc/dtrain/dtraind.yaml, man pages made from --help, and bash completion.
#
#   tools/package.sh [--out DIR] [--version V] [--dtraind BIN --dtrain-submit BIN]
#
# Without the binaries it builds them (bazel build //daemon:dtraind //submit:dtrain-submit).
# The version is VERSION's, plus +gitDATE.HASH in a git checkout. Needs dpkg-deb, fakeroot,
# help2man (tools/setup.sh installs them). Install with `sudo apt install ./dtrain_*.deb`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$PWD
version=""
dtraind=""
submit=""
usage() { sed -n '2,10p' "$0"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out|--version|--dtraind|--dtrain-submit)
      [[ $# -ge 2 && -n $2 ]] ||
        { echo "package: $1 needs a value; see --help" >&2; exit 2; } ;;
  esac
  case "$1" in
    --out) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --dtraind) dtraind=$2; shift 2 ;;
    --dtrain-submit) submit=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "package: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for tool in dpkg-deb fakeroot help2man dpkg-shlibdeps; do
  command -v "$tool" >/dev/null ||
    { echo "package: $tool is missing; fix: bash tools/setup.sh" >&2; exit 2; }
done
if [[ -z $dtraind || -z $submit ]]; then
  (cd "$root" && bazel build //daemon:dtraind //submit:dtrain-submit >&2)
  dtraind=$root/bazel-bin/daemon/dtraind
  submit=$root/bazel-bin/submit/dtrain-submit
fi
for bin in "$dtraind" "$submit"; do
  [[ -x $bin ]] || { echo "package: $bin is not an executable" >&2; exit 2; }
done
if [[ -z $version ]]; then
  version=$(cat "$root/VERSION")
  if hash=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
    version+="+git$(git -C "$root" log -1 --format=%cd --date=format:%Y%m%d).$hash"
  fi
fi
mkdir -p "$out"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/dtrain
install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/etc/dtrain" \
  "$stage/usr/lib/sysctl.d" \
  "$stage/usr/share/man/man1" "$stage/usr/share/bash-completion/completions" \
  "$stage/usr/share/doc/dtrain" "$stage/usr/share/dtrain/slurm"
install -m 0755 -s "$dtraind" "$stage/usr/bin/dtraind"
install -m 0755 -s "$submit" "$stage/usr/bin/dtrain-submit"
install -m 0644 "$root/configs/systemd/dtraind.service" "$stage/lib/systemd/system/"
install -m 0644 "$root/configs/dtraind/dtraind.yaml" "$stage/etc/dtrain/dtraind.yaml"
# The data channel's socket buffers (applied by postinst, and by systemd-sysctl at every boot).
install -m 0644 "$root/configs/sysctl/60-dtrain.conf" "$stage/usr/lib/sysctl.d/60-dtrain.conf"
# The Slurm batch script (docs/operations.md, "Slurm"): sbatch /usr/share/dtrain/slurm/dtrain.sbatch.
install -m 0755 "$root/configs/slurm/dtrain.sbatch" "$stage/usr/share/dtrain/slurm/dtrain.sbatch"
for prog in dtraind dtrain-submit; do
  install -m 0644 "$root/tools/package/bash_completion_$prog" \
    "$stage/usr/share/bash-completion/completions/$prog"
done

# Man pages from --help (the one description of the options there is).
help2man --no-info --no-discard-stderr --version-string="$version" \
  --name "the dtrain daemon (cluster node and controller)" "$stage/usr/bin/dtraind" |
  gzip -9n > "$stage/usr/share/man/man1/dtraind.1.gz"
help2man --no-info --no-discard-stderr --version-string="$version" \
  --name "train, evaluate and run neural networks with dtrain" "$stage/usr/bin/dtrain-submit" |
  gzip -9n > "$stage/usr/share/man/man1/dtrain-submit.1.gz"

# Documentation Debian asks every package for.
install -m 0644 "$root/tools/package/copyright" "$stage/usr/share/doc/dtrain/copyright"
{
  echo "dtrain ($version) unstable; urgency=medium"
  echo
  echo "  * Built from the dtrain repository by tools/package.sh."
  echo
  echo " -- dtrain maintainers <maintainers@dtrain.dev>  $(date -R)"
} | gzip -9n > "$stage/usr/share/doc/dtrain/changelog.gz"

# Maintainer scripts and package metadata.
install -m 0755 "$root/tools/package/postinst" "$root/tools/package/postrm" "$stage/DEBIAN/"
echo "/etc/dtrain/dtraind.yaml" > "$stage/DEBIAN/conffiles"
mkdir -p "$work/shlibs/debian"
printf 'Source: dtrain\n\nPackage: dtrain\nArchitecture: amd64\n' > "$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O -e"$stage/usr/bin/dtraind" \
  -e"$stage/usr/bin/dtrain-submit" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@DEPENDS@/$depends, adduser/" -e "s/@SIZE@/$size/" \
  "$root/tools/package/control" > "$stage/DEBIAN/control"
(cd "$stage" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z |
  xargs -0 md5sum > DEBIAN/md5sums)
chmod 0644 "$stage/DEBIAN/md5sums" "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles"

deb=$out/dtrain_${version}_amd64.deb
fakeroot dpkg-deb --build -Zxz "$stage" "$deb" >/dev/null
echo "$deb"
