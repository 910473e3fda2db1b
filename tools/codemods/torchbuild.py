"""A CUDA build of torch pinned in a requirements file or a ``pip install`` line (TPP003)
becomes the target's install line.

``torch==2.3.1+cu121`` names a wheel that exists only on PyTorch's CUDA index, and
``--index-url https://download.pytorch.org/whl/cu121`` sends every package of the install
there; neither can install the target's torch. The torch pin becomes the target's pair
(TorchTPU: a torch in its supported range plus ``torch-tpu``; TorchNeuron: torch plus
``torch-neuronx``), the companions built against that torch (``torchvision==0.18.1+cu121``)
lose their pin so pip picks the build matching it, and the CUDA index option goes. On the
``accelerator`` target only the ``+cuXXX`` tag and the index go: the version the project
chose stays, and each machine installs its own build of it. Conda's ``pytorch-cuda=12.1``
and pins in pyproject or setup files are left for a human (their syntax is not a line).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..targets import profile

# what replaces the torch pin is the target's profile's torch_requirements (one requirement
# per item); a target with none (device-agnostic code) keeps the project's version
CUDA_INDEX = r"\S*download\.pytorch\.org/whl/(?:nightly/)?cu\d+\S*"
INDEX_OPTION = re.compile(
    rf"\s*(?:--index-url|--extra-index-url|-i|--find-links|-f)(?:=|\s+)[\"']?{CUDA_INDEX}"
)
PIN = re.compile(
    r"(?P<quote>[\"']?)(?<![\w.-])(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?P<extras>\[[^\]]*\])?"
    r"===?(?P<version>[0-9][^+\s;\"']*)\+cu\d+(?P=quote)",
    re.IGNORECASE,
)
SHELL_SPECIAL = re.compile(r"[<>*\[\];&|]")
REQUIREMENTS = re.compile(r"(requirements|constraints)[^/]*\.(txt|in)$|\.txt$", re.IGNORECASE)
SHELL_LIKE = re.compile(r"(\.(sh|bash|zsh|mk)$|(^|/)(Dockerfile|Containerfile|Makefile)[^/]*$)")


def _replacement(pin: re.Match[str], target: str) -> list[str]:
    """The requirements one CUDA pin becomes, each a plain requirement string."""
    name, version = pin["name"], pin["version"]
    extras = pin["extras"] or ""
    requirements = profile(target).torch_requirements
    if not requirements:
        return [f"{name}{extras}=={version}"]
    if name.lower() == "torch":
        return list(requirements)
    return [f"{name}{extras}"]  # a companion: the build that matches the target's torch


def _shell_word(requirement: str) -> str:
    return f'"{requirement}"' if SHELL_SPECIAL.search(requirement) else requirement


def torch_build_line(line: str, target: str, path: str) -> str | None:
    """The line (with its newline; several lines where one pin became two requirements)
    written for ``target``; ``""`` to remove it; None when it cannot be rewritten here."""
    name = PurePosixPath(path).name
    body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
    if REQUIREMENTS.search(name):
        return _requirements_line(body, target, newline)
    if SHELL_LIKE.search(path):
        new = INDEX_OPTION.sub("", body)
        new = PIN.sub(lambda m: " ".join(map(_shell_word, _replacement(m, target))), new)
        return None if new == body else new + newline
    return None


def _requirements_line(body: str, target: str, newline: str) -> str | None:
    code, hash_, comment = body.partition(" #")
    if INDEX_OPTION.match(code) and not INDEX_OPTION.sub("", code).strip():
        return ""  # the whole line was the CUDA index
    pin = PIN.search(code)
    if pin is None or pin.start() != len(code) - len(code.lstrip()):
        return None  # not a requirement line this fixer understands
    marker = code[pin.end() :]
    if marker.strip() and not marker.lstrip().startswith(";"):
        return None
    kept = marker.rstrip()  # an environment marker applies to each requirement
    lines = [f"{requirement}{kept}" for requirement in _replacement(pin, target)]
    lines[0] += marker[len(kept) :] + hash_ + comment
    return "\n".join(lines) + newline
