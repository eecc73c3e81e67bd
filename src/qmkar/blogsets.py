"""The blog's problem sets by name: `blog:qmkar`, `blog:mqar` and `blog:counting`.

The three files were published with the blog post in the public repository
Hanyuezhuohua/QMKAR at commit b5b4f8f (2025-01-27); qmkar does not ship them. They are
read from a data folder ($QMKAR_DATA_DIR, else a folder of the user's own); one that is
missing there is fetched once from that commit (or from a mirror, $QMKAR_BLOG_MIRROR),
checked against the sha256 below, and kept. A file whose sha256 differs is never used.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from qmkar.errors import DatasetError

PREFIX = "blog:"
REPOSITORY = "Hanyuezhuohua/QMKAR"
COMMIT = "b5b4f8f5b6a3506676375a294111cc9328c20eb9"  # 2025-01-27, the files the blog used
DEFAULT_BASE_URL = f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/"
DATA_ENV = "QMKAR_DATA_DIR"  # a folder holding the files (or where fetched ones are kept)
MIRROR_ENV = "QMKAR_BLOG_MIRROR"  # base URL of a mirror serving the same files
FETCH_TIMEOUT = 60.0


class BlogSet(NamedTuple):
    """One published problem set: its file, its sha256 at COMMIT and its size in bytes."""

    file: str
    sha256: str
    size: int


# Hashes of the files at COMMIT (git show COMMIT:FILE | sha256sum), equal to the copies
# in ../shared/data/blog-qmkar/.
SETS: dict[str, BlogSet] = {
    "qmkar": BlogSet("qmkar_problems.json",
                     "bbc73911484fdc9aed18273d4a371ed86aab2dbd03b056c963ee6b6481e1c886", 882_094),
    "mqar": BlogSet("mqar_problems.json",
                    "08566a47cc549c94b2b445b31574e1cee65fd206ab65002345127e5b3d5c8756", 879_754),
    "counting": BlogSet("counting_problems.json",
                        "d0c7b5afc5b0f384b649724479b542360b26045bc446363dc90d4dd99d96597a", 214_003),
}


def is_named(text: str) -> bool:
    """Whether a --dataset value names a blog set (blog:qmkar) rather than a file."""
    return text.startswith(PREFIX)


def data_dir() -> Path:
    """Where the files are looked for and kept: $QMKAR_DATA_DIR, else the user's data
    folder ($XDG_DATA_HOME or ~/.local/share, then qmkar/blog-qmkar)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "qmkar" / "blog-qmkar"


def base_url() -> str:
    url = os.environ.get(MIRROR_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def where_from() -> str:
    return f"github.com/{REPOSITORY} at commit {COMMIT[:7]}"


def lookup(name: str) -> BlogSet:
    key = name.removeprefix(PREFIX)
    if key not in SETS:
        raise DatasetError(f"no blog problem set named {name!r}; the blog published "
                           + ", ".join(PREFIX + k for k in SETS))
    return SETS[key]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def path_for(name: str, note: Callable[[str], None] | None = None) -> Path:
    """The local file of blog set `name` (blog:qmkar...), fetched and kept first if the data
    folder lacks it. `note` hears of a fetch once the file is checked and kept."""
    wanted = lookup(name)
    folder = data_dir()
    path = folder / wanted.file
    if path.is_file():
        if sha256_of(path) != wanted.sha256:
            raise DatasetError(f"{path} is not the published {wanted.file} (its sha256 differs from the "
                               f"one at {where_from()}); remove it to fetch it again")
        return path
    url = base_url() + wanted.file
    data = _download(url, name, folder, wanted)
    found = hashlib.sha256(data).hexdigest()
    if found != wanted.sha256:
        raise DatasetError(f"{url} did not serve the published {wanted.file} (sha256 {found[:12]}..., "
                           f"expected {wanted.sha256[:12]}...); nothing was kept")
    _keep(data, path)
    if note is not None:
        note(f"{name}: fetched {url} (sha256 checked), kept in {folder}")
    return path


def _download(url: str, name: str, folder: Path, wanted: BlogSet) -> bytes:
    import httpx2  # only a fetch needs it (50 ms of every command's start otherwise)

    try:
        with httpx2.Client(timeout=FETCH_TIMEOUT, follow_redirects=True) as client:
            reply = client.get(url)
    except httpx2.HTTPError as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise DatasetError(_absent(name, folder, wanted, f"fetching {url} failed ({reason})")) from None
    if reply.status_code != 200:
        raise DatasetError(_absent(name, folder, wanted, f"{url} answered HTTP {reply.status_code}"))
    return reply.content


def _absent(name: str, folder: Path, wanted: BlogSet, why: str) -> str:
    return (f"{name} is the blog's {wanted.file} from {where_from()}; it is not in {folder} and {why}. "
            f"Put a copy of the file in a folder and point {DATA_ENV} at it "
            f"(or {MIRROR_ENV} at a mirror's base URL)")


def _keep(data: bytes, path: Path) -> None:
    """Write the verified file: to a temporary name beside it, then renamed, so a crash
    never leaves half a file under the real name."""
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as out:
            temporary = out.name
            out.write(data)
        os.replace(temporary, path)
    except OSError as exc:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise DatasetError(f"cannot keep {path.name} in {path.parent} ({exc.strerror or exc}); "
                           f"point {DATA_ENV} at a folder you can write to") from None
