"""Build llama.cpp for this machine: the `llama_cpp` wheel ffwd runs, and the peers.

    python tools/llama_build.py wheel --spec llama-cpp-python==0.3.36 --cmake-args "..."
    python tools/llama_build.py peers --spec llama-cpp-python==0.3.36 --cmake-args "..." --bin DIR

`make install` and `make peers` call it (the Makefile holds the flags). Both
build the package's vendored llama.cpp with the patches of ``patches/llama.cpp``
applied (``git apply``, in name order; its README says what they change). Both
builds are kept under ``~/.cache/ffwd/llama/<key>``, where the key hashes the
package, the patches, the CMake arguments and the machine: pip's own wheel cache
ignores ``CMAKE_ARGS``, so a wheel built with other flags (the AMX kernels on,
say) or without the patches could otherwise come back. A cached wheel that does not
read whole, or a peer binary that does not run, is removed and built again, with a
line naming it. `wheel` builds the
patched source tree and installs it into the running interpreter's environment
whenever the installed one came from another key, and then refuses a library
whose build line still has ggml's AMX kernels in it. `peers` builds llama.cpp's
own ``llama-server`` and ``llama-bench`` from the same patched source with the
same arguments, for ``ffwd bench``; beside them the same two unpatched
(``llama-server-upstream``, ``llama-bench-upstream``: what a user of llama.cpp
runs), and the patched ``test-backend-ops`` (its check of the CPU kernels
against ggml's reference path, run by the tests).

Standard library only: it runs before ffwd is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PEERS = ("llama-server", "llama-bench")
UPSTREAM = "-upstream"  # the same peers built without the patches
# the patched build's checks (run by the tests): against ggml's reference path, and across shapes
CHECKS = ("test-backend-ops", "test-flash-attn-invariance")
PATCHES = Path(__file__).resolve().parents[1] / "patches" / "llama.cpp"
PEER_ARGS = ("-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=ON",
             "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF",
             "-DLLAMA_USE_PREBUILT_UI=OFF")  # no web UI: nothing to download


def cache_root() -> Path:
    """The build cache (FFWD_CACHE_DIR's ``llama`` folder, as ffwd's own cache)."""
    raw = os.environ.get("FFWD_CACHE_DIR") or ""
    if raw:
        return Path(raw).expanduser() / "llama"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "ffwd" / "llama"


def patches(folder: Path = PATCHES) -> list[Path]:
    """The patches to the vendored llama.cpp, in the order they apply."""
    return sorted(folder.glob("*.patch"))


def patches_digest(files: list[Path]) -> str:
    """What the patches say, names and contents (one changed byte is another build)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_key(spec: str, cmake_args: str, patched: str | None = None) -> str:
    """What a build depends on: the package, its patches (`patches_digest`, default those
    of ``patches/llama.cpp``), its CMake arguments and the machine."""
    digest = patches_digest(patches()) if patched is None else patched
    text = "\n".join([spec, digest, " ".join(shlex.split(cmake_args)), platform.system(),
                      platform.machine(), cpu_model()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cpu_model() -> str:
    """The CPU's model name (a native build is compiled for it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def intact_wheel(wheel: Path) -> bool:
    """Whether `wheel` reads whole: a zip whose every member matches its CRC."""
    try:
        with zipfile.ZipFile(wheel) as z:
            return z.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def build_wheel(spec: str, cmake_args: str, out: Path) -> Path:
    """The wheel of `spec`'s patched source built with `cmake_args` (cached in `out`; a
    damaged one is removed, said so, and built again)."""
    for wheel in sorted(out.glob("*.whl")):
        if intact_wheel(wheel):
            return wheel
        print(f"llama-cpp-python: the cached wheel {wheel} is damaged: removed, building it "
              "again", file=sys.stderr, flush=True)
        wheel.unlink()
    print(f"llama-cpp-python: compiling llama.cpp for this machine (several minutes), "
          f"CMAKE_ARGS={cmake_args}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="llama-wheel-"))
    try:
        tree = tmp / "src"
        shutil.copytree(sdist(spec, sdist_dir(spec)), tree, symlinks=True)
        apply_patches(tree / "vendor" / "llama.cpp", patches())
        env = {**os.environ, "CMAKE_ARGS": cmake_args}
        # --no-cache-dir: a wheel from pip's cache may have been built with other flags.
        run(pip("wheel", "--quiet", "--no-deps", "--no-cache-dir", "-w", str(tmp), str(tree)),
            env=env)
        wheel = next(tmp.glob("*.whl"))
        out.mkdir(parents=True, exist_ok=True)
        shutil.move(str(wheel), out / wheel.name)
        return out / wheel.name
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def installed_key(marker: Path) -> str:
    try:
        return marker.read_text().strip()
    except OSError:
        return ""


def build_line() -> str:
    """The installed library's build line, read in a fresh interpreter."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


def amx_kernels(line: str) -> bool:
    """Whether a build line says ggml's AMX kernels are compiled in."""
    return "AMX_INT8 = 1" in line


def install_wheel(spec: str, cmake_args: str) -> int:
    key = build_key(spec, cmake_args)
    wheel = build_wheel(spec, cmake_args, cache_root() / key)
    marker = Path(sys.prefix) / ".llama-build"
    if installed_key(marker) != key:
        run(pip("install", "--quiet", "--force-reinstall", "--no-deps", str(wheel)))
        run(pip("install", "--quiet", str(wheel)))  # its own dependencies
        marker.write_text(key + "\n")
    line = build_line()
    print(f"llama.cpp {line}", flush=True)
    if amx_kernels(line):
        print("llama.cpp was built with ggml's AMX kernels, which crash on the first forward "
              "(llama.cpp #20824): the flags in the Makefile should have turned them off",
              file=sys.stderr)
        return 1
    return 0


def sdist_dir(spec: str) -> Path:
    return cache_root() / "sdist" / spec.replace("==", "-")


def apply_patches(tree: Path, files: list[Path]) -> None:
    """Apply `files` to the llama.cpp source `tree` with ``git apply``, through an empty
    repository of its own (whatever repository holds the tree, or none, is left alone)."""
    if not files:
        return
    with tempfile.TemporaryDirectory(prefix="llama-patch-") as tmp:
        run(["git", "init", "--bare", "--quiet", tmp])
        run(["git", f"--git-dir={tmp}", f"--work-tree={tree}", "apply", "--whitespace=nowarn",
             *map(str, files)], cwd=tree)


def sdist(spec: str, into: Path) -> Path:
    """The package's source tree (its vendored llama.cpp), downloaded once."""
    tree = into / "src"
    if (tree / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        return tree
    into.mkdir(parents=True, exist_ok=True)
    run(pip("download", "--quiet", "--no-deps", "--no-binary", ":all:", "-d", str(into), spec))
    archive = next(into.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(into, filter="data")
    shutil.rmtree(tree, ignore_errors=True)
    (into / top).rename(tree)
    archive.unlink()
    return tree


def build_peers(spec: str, cmake_args: str, bin_dir: Path) -> int:
    """llama-server and llama-bench from `spec`'s vendored llama.cpp, same flags, into `bin_dir`:
    patched, unpatched (``-upstream``), and the patched `CHECKS`."""
    key = build_key(spec, cmake_args)
    out = cache_root() / key / "bin"
    names = [*PEERS, *(p + UPSTREAM for p in PEERS), *CHECKS]
    for name in names:  # a damaged peer is built again (the checks have no --version)
        if name not in CHECKS and (out / name).exists() and not runs(out / name):
            print(f"{out / name} does not run: removed, building the peers again",
                  file=sys.stderr, flush=True)
            (out / name).unlink()
    if not all((out / name).exists() for name in names):
        compile_peers(spec, cmake_args, cache_root() / key, out)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(out / name, bin_dir / name)
    for name in ("llama-server", "llama-server" + UPSTREAM):
        version = subprocess.run([str(bin_dir / name), "--version"], capture_output=True,
                                 text=True)
        built = " ".join((version.stdout + version.stderr).split())
        print(f"{name} in {bin_dir} ({built})", flush=True)
    return 0


def runs(binary: Path) -> bool:
    """Whether `binary --version` runs and exits 0."""
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def compile_peers(spec: str, cmake_args: str, work: Path, out: Path) -> None:
    """Build the unpatched peers, then apply the patches to the same tree and build again:
    ninja recompiles only what they change."""
    src, build = work / "peers-src", work / "peers-build"
    tree = src / "vendor" / "llama.cpp"  # the whole package: its git data names the commit
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(sdist(spec, sdist_dir(spec)), src, symlinks=True)
    args = [a for a in shlex.split(cmake_args) if not a.startswith("-DLLAMA_BUILD_")]
    run(["cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja",
         "-DCMAKE_BUILD_TYPE=Release", *args, *PEER_ARGS])
    out.mkdir(parents=True, exist_ok=True)
    run(["cmake", "--build", str(build), "--target", *PEERS])
    for name in PEERS:
        shutil.copy2(build / "bin" / name, out / (name + UPSTREAM))
    apply_patches(tree, patches())
    run(["cmake", "--build", str(build), "--target", *PEERS, *CHECKS])
    for name in (*PEERS, *CHECKS):
        shutil.copy2(build / "bin" / name, out / name)
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("wheel", "peers"))
    p.add_argument("--spec", required=True, help="the llama-cpp-python requirement")
    p.add_argument("--cmake-args", required=True, help="CMake arguments of the build")
    p.add_argument("--bin", default=str(Path(sys.prefix) / "bin"), help="where peers go")
    a = p.parse_args()
    if a.what == "wheel":
        return install_wheel(a.spec, a.cmake_args)
    return build_peers(a.spec, a.cmake_args, Path(a.bin))


if __name__ == "__main__":
    sys.exit(main())
