"""The dependency overlay is a real install prefix: a wheel that ships a shared library as
data (as an MPI implementation does for mpi4py) and a console script works inside the
sandbox, as it would in the environment pip installed it into. The wheel is built here
(a C library compiled with the system's compiler), installed by the real pip from a
local folder (no index), and used by a real sandboxed run."""

from __future__ import annotations

import base64
import hashlib
import platform
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from test_environment import write
from torchport.sandbox.harness import RunSpec, run
from torchport.tools import depinstall
from torchport.tools.depresolve import resolve

LIBRARY = "int tinympi_size(void) { return 4; }\n"
MODULE = """\
import ctypes

_lib = ctypes.CDLL("libtinympi.so")  # found by the dynamic loader, as libmpi is


def size():
    return _lib.tinympi_size()


def main():
    print(f"TINYMPIRUN size={size()}")
"""
PROGRAM = """\
import subprocess
import tinympi

print("SIZE", tinympi.size())
done = subprocess.run(["tinympirun"], capture_output=True, text=True, check=True)
print(done.stdout.strip())
"""


def _record_line(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def build_native_wheel(folder: Path, work: Path) -> Path:
    """tinympi 0.1: a module that loads ``libtinympi.so`` (shipped in the wheel's
    ``.data/data/lib``, as mpich's wheel ships libmpi) and a ``tinympirun`` script."""
    work.mkdir(parents=True)
    (work / "tinympi.c").write_text(LIBRARY, encoding="utf-8")
    so = work / "libtinympi.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(work / "tinympi.c")], check=True)
    dist = "tinympi-0.1"
    tag = f"py3-none-linux_{platform.machine()}"
    files = {
        "tinympi/__init__.py": MODULE.encode(),
        f"{dist}.data/data/lib/libtinympi.so": so.read_bytes(),
        f"{dist}.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinympi\nVersion: 0.1\n",
        f"{dist}.dist-info/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n"
        ).encode(),
        f"{dist}.dist-info/entry_points.txt": b"[console_scripts]\ntinympirun = tinympi:main\n",
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for rel, data in files.items():
            wheel.writestr(rel, data)
        record = [_record_line(rel, data) for rel, data in files.items()]
        wheel.writestr(
            f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"])
        )
    return path


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc) for the .so")
def test_a_wheels_shared_library_and_console_script_work_in_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    wheels = tmp_path / "wheels"
    build_native_wheel(wheels, tmp_path / "build")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    repo = write(tmp_path / "repo", {"requirements.txt": "tinympi\n", "train.py": PROGRAM})
    overlay = depinstall.prepare(resolve(repo), tmp_path / "cache")
    assert overlay.installed == ["tinympi==0.1"], overlay.unavailable
    prefix = Path(overlay.prefix)
    assert (prefix / "lib" / "libtinympi.so").is_file() and (
        prefix / "bin" / "tinympirun"
    ).is_file()
    spec = RunSpec(
        root=repo,
        command=["python", "train.py"],
        steps=None,
        forwards=None,
        site_paths=(Path(overlay.path),),
        timeout_s=120,
    )
    result = run(spec)
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "SIZE 4" in result.stdout_tail and "TINYMPIRUN size=4" in result.stdout_tail
