#!/usr/bin/env bash
# An aarch64 environment that runs our aarch64 libraries on an x86_64 machine under qemu-user:
# Debian's arm64 Python (from .debs, unpacked into a sysroot, nothing installed for arm64) and a
# runtime-only TVM + numpy from the aarch64 manylinux wheels on PyPI (libtvm_compiler dropped).
# Also installs the cross linker used by the aarch64 target's builds. Idempotent; needs root
# for apt. Usage: tools/cross/aarch64_env.sh [DEST]   (default $KOKORO_TVM_AARCH64_ENV or
# ~/.cache/kokoro-tvm/aarch64). Prints DEST. Run: DEST/python -c 'import tvm'. The wheels'
# versions are those of the Python in $PYTHON (default: python3 on the PATH, the active venv's).
set -euo pipefail
dest="${1:-${KOKORO_TVM_AARCH64_ENV:-$HOME/.cache/kokoro-tvm/aarch64}}"
python_host="${PYTHON:-python3}"

# libc6-dev-arm64-cross: the C runtime objects (crti.o) the linker needs for shared libraries;
# only a recommendation of gcc-aarch64-linux-gnu, so --no-install-recommends leaves it out.
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null \
        || [ ! -f /usr/aarch64-linux-gnu/lib/crti.o ]; then
    apt-get update -q && apt-get install -y -q --no-install-recommends gcc-aarch64-linux-gnu \
        libc6-dev-arm64-cross qemu-user
fi
if [ -x "$dest/python" ] && [ -f "$dest/.complete" ]; then
    echo "$dest"; exit 0
fi

rm -rf "$dest" && mkdir -p "$dest/debs" "$dest/sysroot" "$dest/wheels" "$dest/site"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt-get update -q
fi
if ! apt-cache show python3.11-minimal:arm64 >/dev/null 2>&1; then apt-get update -q; fi
packages="libc6 libgcc-s1 libstdc++6 python3.11-minimal libpython3.11-minimal
          libpython3.11-stdlib libffi8 zlib1g libexpat1 libbz2-1.0 liblzma5 libcrypt1 libuuid1
          libssl3 libtirpc3 libnsl2 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libdb5.3"
(cd "$dest/debs" && chmod 777 . && apt-get download -q $(printf '%s:arm64 ' $packages))
for deb in "$dest"/debs/*.deb; do dpkg-deb -x "$deb" "$dest/sysroot"; done

# The wheels of the versions this venv has (TVM's runtime must match the library's builder).
versions=$("$python_host" -c 'from importlib.metadata import version
print(" ".join(d + "==" + version(d) for d in ("apache-tvm", "apache-tvm-ffi", "numpy", "typing_extensions")))')
"$python_host" -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
    --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 \
    --platform manylinux2014_aarch64 --platform any -d "$dest/wheels" $versions
"$python_host" - "$dest" <<'PY'
import sys, zipfile
from pathlib import Path
dest = Path(sys.argv[1])
skip = ("libtvm_compiler.so", "/3rdparty/", "/src/", "/include/")  # compiler and its sources
for wheel in sorted((dest / "wheels").glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if not any(s in "/" + info.filename for s in skip):
                z.extract(info, dest / "site")
                mode = info.external_attr >> 16
                if mode:
                    (dest / "site" / info.filename).chmod(mode & 0o777)
PY
rm -rf "$dest/wheels" "$dest/debs"

cat > "$dest/python" <<SH
#!/bin/sh
# Debian's arm64 Python under qemu-user, with the runtime-only TVM and numpy on its path.
export PYTHONPATH="$dest/site\${PYTHONPATH:+:\$PYTHONPATH}"
export TVM_USE_RUNTIME_LIB=1 PYTHONNOUSERSITE=1
exec qemu-aarch64 -L "$dest/sysroot" "$dest/sysroot/usr/bin/python3.11" "\$@"
SH
chmod +x "$dest/python"
"$dest/python" -c 'import platform, numpy, tvm; print(platform.machine(), numpy.__version__, tvm.__version__)' >&2
touch "$dest/.complete"
echo "$dest"
