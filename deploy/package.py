"""Package ``functions/`` and ``store/`` as a Lambda zip (the code; dependencies come from the
runtime's Python environment locally, or from the container image on AWS), with any custom
environment packages (``--env-package``) beside them at the zip's root, where the handler's
``import package.module`` of a ``package.module:EnvId`` id finds them."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import keyword
import re
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from deploy.errors import DeployError

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("functions", "store")
# Our own top-level packages: an env package of the same name would replace ours in the zip
# (or, on the local runtime, hide the runtime's) and break every function.
OURS = ("functions", "store", "runtime", "orchestrator", "deploy")
FUNCTION_REQUIREMENTS = REPO_ROOT / "deploy" / "requirements-function.txt"
# Installed in the function image before the requirements file (deploy/Dockerfile.function).
IMAGE_EXTRAS = ("torch",)
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)


class BadEnvPackage(DeployError):
    """An ``--env-package`` that cannot ship: not a folder, not a package, or a name that
    would shadow our code, the standard library or a module the functions import."""


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"extra\s*==\s*[\"']([^\"']+)[\"']")


def _function_dependency_modules() -> dict[str, str]:
    """Top-level module -> distribution, for every distribution the function image installs
    (its requirements file, torch, and what they require with the extras asked for, as
    installed here). The code folder comes first on a function's sys.path, so a package of
    one of these names at the zip's root would replace the real module for every handler."""
    wanted: list[tuple[str, frozenset[str]]] = [(d, frozenset()) for d in IMAGE_EXTRAS]
    for line in FUNCTION_REQUIREMENTS.read_text().splitlines():
        if (match := _REQUIREMENT.match(line.split("#", 1)[0])):
            wanted.append((match.group(1), frozenset(_extras(match.group(2)))))
    seen: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        dist, extras = wanted.pop()
        dist = _norm(dist)
        if (dist, extras) in seen:
            continue
        seen.add((dist, extras))
        try:
            requires = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: nothing here it could shadow
        for req in requires:
            spec, _, marker = req.partition(";")
            asked = _EXTRA_MARKER.findall(marker)
            if asked and not extras & {_norm(e) for e in asked}:
                continue  # an extra nobody asked for (its test or docs tools)
            if (match := _REQUIREMENT.match(spec)):
                wanted.append((match.group(1), frozenset(_extras(match.group(2)))))
    dists = {d for d, _ in seen}
    return {module: names[0]
            for module, names in importlib.metadata.packages_distributions().items()
            if any(_norm(n) in dists for n in names)}


def _extras(extras: str | None) -> list[str]:
    return [_norm(e.strip()) for e in (extras or "").split(",") if e.strip()]


def check_env_package(path: str | Path) -> Path:
    """The package folder ``path``, resolved, if it can ship at the zip's root; else
    :class:`BadEnvPackage` naming what is wrong."""
    given = str(path)
    folder = Path(path).expanduser()
    if not folder.exists():
        raise BadEnvPackage(f"--env-package {given}: no such folder")
    if not folder.is_dir():
        raise BadEnvPackage(f"--env-package {given}: not a folder (give the package's folder, "
                            "the one holding its __init__.py)")
    folder = folder.resolve()
    if not (folder / "__init__.py").is_file():
        raise BadEnvPackage(f"--env-package {given}: not a package (no __init__.py in {folder})")
    name = folder.name
    if not name.isidentifier() or keyword.iskeyword(name):
        raise BadEnvPackage(f"--env-package {given}: {name!r} is not an importable package name")
    if name in OURS:
        raise BadEnvPackage(f"--env-package {given}: {name!r} would shadow Stellaris's own "
                            f"package of that name ({', '.join(OURS)}): rename it")
    if name in sys.stdlib_module_names:
        raise BadEnvPackage(f"--env-package {given}: {name!r} would shadow the standard "
                            "library's module of that name: rename it")
    dist = _function_dependency_modules().get(name)
    if dist is not None:
        raise BadEnvPackage(f"--env-package {given}: {name!r} would shadow the module of that "
                            f"name from {dist}, which the functions use: rename it")
    return folder


def _files(base: Path, python_only: bool) -> Iterable[Path]:
    """The files of the package at ``base``: never bytecode caches or hidden files (an
    editor's or VCS's); our packages ship their ``.py`` files only, an env package all its
    files (an env may load assets, e.g. a MuJoCo XML, from beside its module)."""
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base).parts
        if not path.is_file() or "__pycache__" in rel or any(p.startswith(".") for p in rel):
            continue
        if path.suffix == ".pyc" or (python_only and path.suffix != ".py"):
            continue
        yield path


def build_function_zip(root: Path = REPO_ROOT, packages: tuple[str, ...] = PACKAGES,
                       env_packages: Sequence[str | Path] = ()) -> bytes:
    """A deterministic zip (sorted entries, fixed timestamps): same code, same CodeSha256.
    ``env_packages`` (package folders) go at its root beside ``packages``; each is checked
    with :func:`check_env_package` and a name given twice is a :class:`BadEnvPackage`."""
    folders = [check_env_package(p) for p in env_packages]
    names = [f.name for f in folders]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadEnvPackage(f"--env-package: two packages named {twice[0]!r}")
    trees: list[tuple[Path, bool]] = []
    for pkg in packages:
        base = root / pkg
        if not (base / "__init__.py").exists():
            raise FileNotFoundError(f"package {pkg!r} not found under {root}")
        trees.append((base, True))
    trees.extend((f, False) for f in sorted(folders, key=lambda f: f.name))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for base, python_only in trees:
            for path in _files(base, python_only):
                arcname = "/".join((base.name, *path.relative_to(base).parts))
                info = zipfile.ZipInfo(arcname, date_time=_FIXED_TIME)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
    return buf.getvalue()


def code_sha256(zip_bytes: bytes) -> str:
    """Lambda's CodeSha256: base64 of the SHA-256 of the zip."""
    return base64.b64encode(hashlib.sha256(zip_bytes).digest()).decode()
