"""One file out of a Debian package, for machines whose only network is a package mirror.

Some real data sets ship inside Debian packages (UCI Mushroom in ``r-cran-cba``, Fashion-MNIST in
``dataset-fashion-mnist``). Where a data set's own site cannot be reached, ``apt-get download`` fetches the
package (no installation, no root needed for the download itself) and ``dpkg-deb`` unpacks the one member
we need; the file is written atomically next to the other data.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from csg.io.atomic import atomic_open

log = logging.getLogger(__name__)


def extract_member(package: str, member: str, target: Path, timeout: float = 120.0) -> bool:
    """``member`` (a path inside the package, e.g. ``usr/lib/R/site-library/cba/data/Mushroom.rda``) written to
    ``target``. False, with a warning, where apt-get or dpkg-deb is missing or the download fails."""
    return extract_members(package, {member: target}, timeout)


def extract_members(package: str, members: dict[str, Path], timeout: float = 120.0) -> bool:
    """Each ``member`` of the package written to its target, from one download; all of them or none (nothing is
    written unless every member was read). False, with a warning, as :func:`extract_member`."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return False
    with tempfile.TemporaryDirectory() as scratch:
        try:
            subprocess.run(["apt-get", "download", package], cwd=scratch, check=True, capture_output=True,
                           timeout=timeout)
            deb = next(Path(scratch).glob(f"{package}_*.deb"))
            content = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True,
                                     timeout=timeout).stdout
            with tarfile.open(fileobj=io.BytesIO(content)) as archive:
                data = {member: archive.extractfile(f"./{member.lstrip('/')}").read() for member in members}
        except (OSError, subprocess.SubprocessError, StopIteration, KeyError, AttributeError, tarfile.TarError) as error:
            log.warning("Debian package %s: %s", package, str(error).splitlines()[0] if str(error) else type(error).__name__)
            return False
    for member, target in members.items():
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(target) as handle:
            handle.write(data[member])
    return True
