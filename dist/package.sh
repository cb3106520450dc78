#!/usr/bin/env bash
# Build rampart's .deb from a staged tree with dpkg-deb (docs/operations.md, "Package").
#   dist/package.sh [--binary PATH] [--out DIR]
# Without --binary it builds the binary with the `dist` profile (release, no debug
# info, stripped). --binary takes a binary built elsewhere (the test passes its
# `ci` build); it is stripped here either way.
# dpkg-deb rather than cargo-deb: nothing to install beyond Debian's dpkg, the
# completions and man pages come from the built binary itself, and the staged
# tree below is the whole packaging — one file to read.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="" out="target/package"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "package.sh: unknown argument $1 (use --binary PATH, --out DIR)" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  cargo build --profile dist -p rampart --bin rampart
  bin=target/dist/rampart
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/rampart_${version}_${arch}"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/etc/rampart" "$root/lib/systemd/system" \
  "$root/usr/share/man/man1" "$root/usr/share/doc/rampart" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d"
install -m 0755 "$bin" "$root/usr/bin/rampart"
strip --strip-all "$root/usr/bin/rampart"
install -m 0644 dist/rampart.toml "$root/etc/rampart/rampart.toml"
install -m 0644 dist/rampart-ddos.toml "$root/etc/rampart/ddos.toml"
install -m 0644 dist/rampart-tenant.toml "$root/etc/rampart/tenant.toml"
# One unit: `rampart run` (docs/operations.md says why there is no per-application unit).
install -m 0644 dist/rampart.service "$root/lib/systemd/system/rampart.service"
"$root/usr/bin/rampart" completions bash > "$root/usr/share/bash-completion/completions/rampart"
"$root/usr/bin/rampart" completions zsh > "$root/usr/share/zsh/vendor-completions/_rampart"
"$root/usr/bin/rampart" completions fish > "$root/usr/share/fish/vendor_completions.d/rampart.fish"
"$root/usr/bin/rampart" man --out "$root/usr/share/man/man1"
gzip -9n "$root"/usr/share/man/man1/*.1
cp README.md docs/*.md "$root/usr/share/doc/rampart/"
printf '/etc/rampart/rampart.toml\n/etc/rampart/ddos.toml\n/etc/rampart/tenant.toml\n' > "$root/DEBIAN/conffiles"
size=$(du -sk "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: rampart
Version: $version
Architecture: $arch
Maintainer: rampart maintainers <rampart@localhost>
Installed-Size: $size
Depends: libc6, libgcc-s1, libelf1, zlib1g
Recommends: iproute2, ethtool
Section: net
Priority: optional
Homepage: https://example.invalid/rampart
Description: Linux host data plane for network security and analytics on eBPF/XDP
 DDoS mitigation (XDP blacklist, detection, hardware offload), stream
 analytics and tenants' XDP programs with fair CPU shares, in one binary.
 The rampart service (`rampart run`) runs the applications configured in
 /etc/rampart/rampart.toml on the interfaces named there.
CONTROL
mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/" >/dev/null
echo "$out/rampart_${version}_${arch}.deb"
