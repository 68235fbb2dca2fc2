#!/usr/bin/env bash
# Packs what a GPU run needs into one ignored folder that the device tool can carry:
#   scripts/gpu_bundle.sh [BUILD_DIR] [BUNDLE_DIR]      (defaults: build-cuda .gpu)
# The bundle holds the CUDA build's executables (bin/) and the non-system shared libraries they
# load (lib/). On the GPU machine: export LD_LIBRARY_PATH=$PWD/BUNDLE_DIR/lib; BUNDLE_DIR/bin/kvbuf ...
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-cuda}
bundle=${2:-.gpu}
./scripts/install_deps.sh  # FlashInfer's headers for `kvbuf step --measure` among them
KVBUF_BUILD_DIR=$build_dir ./scripts/build.sh
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
find "$build_dir" -type f -perm -u+x \( -path "*/bench/*" -o -path "*/kernels/*" -o -path "*/reference/*" -o -path "*/sim/*" \) \
  ! -name "*.so*" ! -path "*/CMakeFiles/*" -exec cp {} "$bundle/bin/" \;
for exe in "$bundle"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}' | grep -E "libfmt|libbenchmark|libgtest|libgmock" || true
done | sort -u | xargs -r -I{} cp -L {} "$bundle/lib/"
{ git rev-parse --short=12 HEAD; } | tr -d "\n" > "$bundle/COMMIT"
[ -z "$(git status --porcelain --untracked-files=no)" ] || printf -- "-dirty" >> "$bundle/COMMIT"
du -sh "$bundle"; echo "commit: $(cat "$bundle/COMMIT")"
