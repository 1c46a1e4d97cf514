#!/usr/bin/env bash
# Install everything stoker needs to build, test, benchmark and run its demo,
# from Debian packages only. Idempotent: installs only what is missing.
#   scripts/install-deps.sh           install what is missing (as root, or with sudo)
#   scripts/install-deps.sh --check   only list what is missing (exit 1 when something is)
# Without root and without sudo it installs nothing: it names the missing
# packages and the apt-get command to run, and fails.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config          # toolchain (CMake >= 3.25)
  zlib1g-dev                                # IDX .gz reading
  libjpeg62-turbo-dev libspng-dev           # JPEG (libjpeg-turbo) and PNG decoding
  libwebp-dev libtiff-dev libgif-dev        # WebP, TIFF and GIF decoding (BMP is stoker's own)
  libzstd-dev                               # raw-pixel shard compression
  clang libclang-rt-14-dev                  # libFuzzer targets (fuzz/)
  libxxhash-dev                             # CLI --digest
  libcmocka-dev                             # C unit tests
  dataset-fashion-mnist                     # the demo's data
  liblmdb-dev libhdf5-dev libblosc-dev      # readers: LMDB, HDF5 (metadata), Zarr blosc chunks
  libjansson-dev                            # reader: COCO annotation files (JSON)
  libcurl4-openssl-dev                      # http(s):// and s3:// datasets (src/io/http.c, libcurl multi)
  libssl-dev libexpat1-dev                  # S3: SigV4 SHA-256/HMAC (libcrypto), ListObjectsV2 XML (expat)
  python3-botocore                          # S3: the reference signer the SigV4 tests compare with
  python3 python3-numpy python3-pytest      # Python tests (Debian's /usr/bin/python3)
  python3-torch python3-torchvision python3-pil python3-psutil python3-xxhash
  python3-dev python3-setuptools python3-pip python3-venv python3-h5py   # extension build, benchmarks
  python3-lmdb python3-zarr python3-numcodecs python3-protobuf python3-crc32c  # independent writers for the reader tests
  python3-numba                             # NumbaOp: user-defined ops as @numba.cfunc (docs/ops.md)
  nginx-light                               # remote datasets: the HTTP server of the tests (tests/net/)
  libnginx-mod-http-echo                    # its echo_sleep: a link's round-trip time where netem is refused
  python3-botocore                          # remote datasets: reference S3 client and SigV4 signer
  iproute2 curl openssl                     # tests/net/: ip netns + tc shaping, curl (HTTP/2 checks), test TLS certificates
  git                                       # test.sh: pip install . and the sdist must leave git status unchanged
  lomiri-wallpapers-16.04 lomiri-wallpapers-20.04 mate-backgrounds   # the photos set's source photographs
  plasma-workspace-wallpapers opencv-doc    #   (scripts/make_photos.py)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${1:-}" = --check ]; then
  if ((${#missing[@]})); then
    echo "install-deps: missing Debian packages: ${missing[*]}"
    exit 1
  fi
  echo "install-deps: all dependencies present"
  exit 0
fi

if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo > /dev/null; then
      echo "install-deps: missing Debian packages: ${missing[*]}" >&2
      echo "install-deps: not root and no sudo: as root, run" \
           "apt-get install --no-install-recommends ${missing[*]}" >&2
      exit 1
    fi
    SUDO="sudo"
  fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all dependencies present"
