"""unshare backend: namespaces from util-linux when bubblewrap is absent.

New network (only loopback), pid (the tree dies with it), ipc, uts (hostname
hostpaths.HOSTNAME) and mount namespaces. In the private mount namespace a new
root is built on a tmpfs with exactly bwrap's view (hostpaths.sandbox_view:
system dirs, the Python, the ``readonly`` paths read-only, scratch writable, a
private /etc/hosts, a private /tmp, a fresh /proc, a
minimal /dev), the process enters it with pivot_root (chroot where pivot_root
cannot run) and the host's root is detached; then every mount but scratch, /tmp
and /dev/shm is checked read-only and all capabilities are dropped before the
program runs. Any step that fails stops the run (exit 126) before the program
starts: it never runs with the host's view. Not root: the same inside a user
namespace (``--map-root-user``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .env import safe_env
from .hostpaths import HOSTNAME, Mount, sandbox_view
from .spec import RunSpec

EXIT_NO_VIEW = 126
# Where the new root's tmpfs is mounted while it is built (in the private mount
# namespace only): the first that exists and is no part of the view.
_BUILD_AT = ("/sys", "/mnt", "/media", "/srv")
_TOOLS = ("unshare", "setpriv", "mount", "umount")
# Where the boot looks for them (a user's PATH often lacks the sbin directories).
_TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# Both stages: where the tools are, and how a stage gives up.
_PRELUDE = f"""TOOL_PATH={_TOOL_PATH}
fail() {{
  echo "torchport sandbox (unshare): cannot build the private filesystem view: $*" >&2
  exit {EXIT_NO_VIEW}
}}
"""

# Runs inside the new namespaces, as (namespace) root, with the host's view still in
# place: builds the new root at $1 from the (kind, path, target) triples, enters it.
_BOOT = (
    _PRELUDE
    + r"""
set -u
root=$1 scratch=$2 scratch_mi=$3 enter=$4 seal=$5 host=$6 prog_path=${PATH-}
shift 6
PATH=$TOOL_PATH
export PATH
ip link set lo up 2>/dev/null || true
# the fixed hostname /etc/hosts knows (sethostname: a user namespace's root may not write
# /proc/sys); where neither works the name stays the host's, which only the process knows
hostname "$host" 2>/dev/null || { printf %s "$host" >/proc/sys/kernel/hostname; } 2>/dev/null
make_dev() {
  for n in null zero full random urandom tty; do
    : > "$1/$n" && mount --bind "/dev/$n" "$1/$n" || return 1
  done
  mkdir "$1/shm" && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$1/shm" &&
  ln -s /proc/self/fd "$1/fd" && ln -s /proc/self/fd/0 "$1/stdin" &&
  ln -s /proc/self/fd/1 "$1/stdout" && ln -s /proc/self/fd/2 "$1/stderr"
}
mount -t tmpfs -o mode=0755,nosuid tmpfs "$root" || fail "a tmpfs at $root"
while [ "$1" != -- ]; do
  kind=$1 src=$2 target=$3 dst=$root$2
  shift 3
  case $kind in
    symlink) mkdir -p "${dst%/*}" && ln -s "$target" "$dst" ;;
    ro|rw)
      # mount points only where missing: never truncate a file of an earlier bind
      if [ -d "$src" ]; then mkdir -p "$dst"
      else mkdir -p "${dst%/*}" && { [ -e "$dst" ] || : > "$dst"; }; fi &&
      mount --rbind "$src" "$dst" &&
      { [ "$kind" = rw ] || mount -o remount,bind,ro "$dst"; } ;;
    file)
      mkdir -p "${dst%/*}" && { [ -e "$dst" ] || : > "$dst"; } &&
      mount --bind "$target" "$dst" && mount -o remount,bind,ro "$dst" ;;
    proc) mkdir -p "$dst" && mount -t proc -o ro,nosuid,nodev,noexec proc "$dst" ;;
    tmpfs) mkdir -p "$dst" && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$dst" ;;
    dev) mkdir -p "$dst" && mount -t tmpfs -o mode=0755,nosuid tmpfs "$dst" && make_dev "$dst" ;;
    *) false ;;
  esac || fail "$kind $src"
done
shift
cd "$root" || fail "cd $root"
if [ "$enter" = pivot_root ] && mkdir .oldroot && pivot_root . .oldroot; then
  cd / && umount -l /.oldroot && rmdir /.oldroot || fail "detaching the host's root"
  exec /bin/sh -c "$seal" sh "$scratch" "$scratch_mi" "$prog_path" "$@"
fi
rmdir .oldroot 2>/dev/null
exec chroot "$root" /bin/sh -c "$seal" sh "$scratch" "$scratch_mi" "$prog_path" "$@"
"""
)

# Runs inside the new root: every mount read-only but the writable three (checked,
# not hoped for), then the program with no capabilities and no way to gain any.
_SEAL = (
    _PRELUDE
    + r"""
set -u
scratch=$1 scratch_mi=$2 prog_path=$3
shift 3
PATH=$TOOL_PATH
writable() { [ "$1" = /tmp ] || [ "$1" = /dev/shm ] || [ "$1" = "$scratch_mi" ]; }
for pass in remount check; do
  while read -r _ _ _ _ mp opts _; do
    writable "$mp" && continue
    case ,$opts, in *,ro,*) continue ;; esac
    [ $pass = check ] && fail "$mp is still writable"
    mount -o remount,bind,ro "$(printf '%b' "$mp")" 2>/dev/null
  done < /proc/self/mountinfo
done
cd "$scratch" || fail "cd $scratch"
setpriv=$(command -v setpriv) || fail "setpriv not found in the new root"
if [ -n "$prog_path" ]; then PATH=$prog_path; export PATH; else unset PATH; fi
exec "$setpriv" --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
"""
)


def _mountinfo_escape(path: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline, backslash in octal)."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def _build_at(view: list[Mount]) -> str:
    """A host directory to mount the new root's tmpfs on: one no view path is in."""
    for candidate in _BUILD_AT:
        here = Path(candidate)
        related = (here.is_relative_to(m.path) or Path(m.path).is_relative_to(here) for m in view)
        if here.is_dir() and not here.is_symlink() and not any(related):
            return candidate
    raise ValueError(f"unshare: none of {_BUILD_AT} can hold the new root here")


def command(spec: RunSpec, *, map_root: bool | None = None, enter: str = "pivot_root") -> list[str]:
    """The unshare command line that runs ``spec.argv`` isolated.

    ``map_root`` (default: when not root) adds a user namespace; ``enter="chroot"``
    takes the fallback that is otherwise only used where pivot_root fails.
    """
    view = sandbox_view(spec.scratch, spec.readonly)
    ns = ["--net", "--pid", "--fork", "--kill-child", "--mount", "--ipc", "--uts"]
    if os.geteuid() != 0 if map_root is None else map_root:
        ns.insert(0, "--map-root-user")
    scratch = str(spec.scratch)
    args = [_build_at(view), scratch, _mountinfo_escape(scratch), enter, _SEAL, HOSTNAME]
    for m in view:
        args += [m.kind, m.path, m.target or "-"]
    boot = ["/bin/sh", "-c", _BOOT, "sh", *args, "--"]
    return ["unshare", "--propagation", "private", *ns, "--", *boot, *spec.argv]


@functools.cache
def unavailable() -> str | None:
    """None when unshare can build its private view here, else why not (cached probe)."""
    for tool in _TOOLS:
        if shutil.which(tool, path=_TOOL_PATH) is None:
            return f"{tool} not found (Debian package util-linux / mount)"
    if not any(shutil.which(tool, path=_TOOL_PATH) for tool in ("pivot_root", "chroot")):
        return "neither pivot_root nor chroot found (util-linux, coreutils)"
    with tempfile.TemporaryDirectory(prefix="torchport-unshare-probe-") as tmp:
        scratch = Path(tmp).resolve()
        try:
            spec = RunSpec(argv=["true"], scratch=scratch, env=safe_env(home=scratch))
            res = subprocess.run(
                command(spec), capture_output=True, timeout=20, check=False, env=spec.env
            )
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            return f"unshare cannot start: {exc}"
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace").strip()
        return f"unshare cannot build a private view here: {err or f'exit {res.returncode}'}"
    return None
