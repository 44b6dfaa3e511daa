#!/usr/bin/env bash
# Puts the character language model's corpus (examples/char_lm) where
# strata's examples look for it:
#   scripts/fetch-corpus.sh [dir]
# dir defaults to $STRATA_CORPUS_DIR, else $XDG_CACHE_HOME/strata/corpus,
# else $HOME/.cache/strata/corpus. The corpus is Debian's fortunes (the
# package `fortunes`, 1:1.99.1-7.3, bookworm): its 40 fortune files
# concatenated in name order into fortunes.txt, 2,478,275 bytes of UTF-8
# English. The package is fetched with `apt-get download` (no install) and
# checked against the SHA-256 below, and so is the text, before it is moved
# into place (one atomic rename). Does nothing when fortunes.txt is there and
# intact. Prints one line (the file) on success.
set -euo pipefail

package=fortunes
version=1:1.99.1-7.3
deb_sha256=41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5
text_sha256=2fc106f17c1d1059a2883c69171a75c17df0d426ae6c3de824cca88b787dcc8b

die() {
  echo "fetch-corpus: $*" >&2
  exit 1
}

if [ $# -gt 1 ]; then
  die "usage: $0 [dir]"
elif [ $# -eq 1 ]; then
  dir=$1
elif [ -n "${STRATA_CORPUS_DIR:-}" ]; then
  dir=$STRATA_CORPUS_DIR
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  dir=$XDG_CACHE_HOME/strata/corpus
elif [ -n "${HOME:-}" ]; then
  dir=$HOME/.cache/strata/corpus
else
  die "none of STRATA_CORPUS_DIR, XDG_CACHE_HOME or HOME is set; pass the directory as an argument"
fi

command -v sha256sum > /dev/null || die "sha256sum not found (it is in coreutils)"
sum_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dir/fortunes.txt" ]; then
  if [ "$(sum_of "$dir/fortunes.txt")" = "$text_sha256" ]; then
    echo "$dir/fortunes.txt"
    exit 0
  fi
  echo "fetch-corpus: $dir/fortunes.txt has the wrong SHA-256; removing it and fetching again" >&2
  rm -f "$dir/fortunes.txt"
fi

command -v apt-get > /dev/null || die "apt-get not found; copy fortunes.txt into $dir by hand"
command -v dpkg-deb > /dev/null || die "dpkg-deb not found; copy fortunes.txt into $dir by hand"
tmp=$(mktemp -d)
part=""
cleanup() {
  rm -rf "$tmp"
  if [ -n "$part" ]; then rm -f "$part"; fi
}
trap cleanup EXIT
chmod 755 "$tmp"  # apt-get download writes as the _apt user when it can
download() { (cd "$tmp" && apt-get download -q "$package=$version" > apt.out 2>&1); }
if ! download && [ "$(id -u)" -eq 0 ]; then  # package lists missing or stale: refresh them once (root)
  apt-get update -qq > /dev/null 2>&1 || true
  download || true
fi
if ! ls "$tmp"/*.deb > /dev/null 2>&1; then
  cat "$tmp/apt.out" >&2
  die "apt-get download $package=$version failed (is a Debian bookworm mirror reachable? apt-get update may help)"
fi
deb=$(ls "$tmp"/*.deb 2> /dev/null | head -n 1)
[ -n "$deb" ] || die "apt-get download $package left no .deb"
got=$(sum_of "$deb")
[ "$got" = "$deb_sha256" ] || die "checksum mismatch for $package $version: expected $deb_sha256, got $got; nothing was written"
dpkg-deb -x "$deb" "$tmp/x"
src=$tmp/x/usr/share/games/fortunes
# the fortune files: every regular file but the indexes (.dat) and the .u8 links
find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -printf '%f\n' | LC_ALL=C sort |
  while read -r f; do cat "$src/$f"; done > "$tmp/fortunes.txt"
got=$(sum_of "$tmp/fortunes.txt")
[ "$got" = "$text_sha256" ] || die "the corpus made from $package has SHA-256 $got, expected $text_sha256; nothing was written"

mkdir -p "$dir"
part=$(mktemp "$dir/.fortunes.txt.XXXXXX")
cp "$tmp/fortunes.txt" "$part"
chmod 644 "$part"
mv -f "$part" "$dir/fortunes.txt"
part=""
echo "$dir/fortunes.txt"
