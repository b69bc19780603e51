"""notMNIST (Bulatov 2011): letters A-J in many fonts, the paper's out-of-distribution set for MNIST models.

Layout: ``root/A/*.png`` ... ``root/J/*.png`` (the ``notMNIST_small`` archive),
28 x 28 grayscale. The original archive has a few unreadable files: they are
skipped and counted. :func:`render_letters` draws a notMNIST-style tree from the
TrueType fonts that matplotlib ships, the same construction, for machines
without the archive.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from csg.errors import DataNotFoundError

log = logging.getLogger(__name__)
LETTERS = "ABCDEFGHIJ"
URL = "http://yaroslavvb.com/upload/notMNIST/notMNIST_small.tar.gz"


def load_notmnist(root: str, download: bool = False) -> tuple[torch.Tensor, torch.Tensor, str]:
    """uint8 images (N, 1, 28, 28), labels 0..9 for A..J, and a description of the source."""
    from PIL import Image, UnidentifiedImageError

    base = Path(root).expanduser()
    if not all((base / letter).is_dir() for letter in LETTERS) and download:
        _download(base)
    if not all((base / letter).is_dir() for letter in LETTERS):
        raise DataNotFoundError(
            "ood.root", str(root),
            f"notMNIST not found: expected the folders {base}/A ... {base}/J of PNG images; "
            "python scripts/make_letters.py draws a notMNIST-style set",
        )
    images, labels, skipped = [], [], 0
    for label, letter in enumerate(LETTERS):
        for path in sorted((base / letter).glob("*.png")):
            try:
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("L").resize((28, 28)), dtype=np.uint8)
            except (OSError, UnidentifiedImageError, ValueError):
                skipped += 1
                continue
            images.append(pixels)
            labels.append(label)
    if skipped:
        log.warning("notMNIST: skipped %d unreadable files in %s", skipped, base)
    if not images:
        raise DataNotFoundError("ood.root", str(root), f"no readable PNG images under {base}/A ... {base}/J")
    x = torch.from_numpy(np.stack(images)).reshape(-1, 1, 28, 28)
    return x, torch.tensor(labels), f"notMNIST PNG tree {base} ({len(images)} images, {skipped} unreadable skipped)"


def _download(base: Path) -> None:
    from csg._torchvision_compat import ensure_torchvision

    try:
        ensure_torchvision().datasets.utils.download_and_extract_archive(URL, str(base.parent))
    except Exception as error:  # noqa: BLE001
        log.warning("notMNIST download failed: %s", str(error).splitlines()[0] if str(error) else type(error).__name__)


def _draws_capitals(path: Path) -> bool:
    """True when the font draws A-J as ten distinct, non-empty glyphs (symbol fonts and stubs do not)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(path), 24)
    glyphs = set()
    for letter in LETTERS:
        canvas = Image.new("L", (32, 32), 0)
        ImageDraw.Draw(canvas).text((4, 0), letter, fill=255, font=font)
        pixels = canvas.tobytes()
        if not any(pixels):
            return False
        glyphs.add(pixels)
    return len(glyphs) == len(LETTERS)


def matplotlib_fonts() -> list[Path]:
    """The TrueType fonts bundled with matplotlib that draw the Latin capitals A-J."""
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    fonts = sorted(p for p in folder.glob("*.ttf") if not p.name.startswith("cmex"))  # cmex: delimiters, not letters
    return [path for path in fonts if _draws_capitals(path)]


def render_letters(root: str | Path, per_letter: int = 200, seed: int = 0) -> Path:
    """Write ``root/A..J/*.png``: letters drawn with matplotlib's fonts, random size, position and stroke.

    notMNIST was built the same way from glyphs of many fonts; this set uses
    the ~20 fonts any matplotlib installation has.
    """
    from PIL import Image, ImageDraw, ImageFont

    from csg.io.atomic import atomic_open

    root = Path(root)
    fonts = matplotlib_fonts()
    rng = np.random.default_rng(seed)
    for letter in LETTERS:
        (root / letter).mkdir(parents=True, exist_ok=True)
        for index in range(per_letter):
            font = ImageFont.truetype(str(fonts[rng.integers(len(fonts))]), int(rng.integers(18, 27)))
            canvas = Image.new("L", (28, 28), 0)
            draw = ImageDraw.Draw(canvas)
            left, top, right, bottom = draw.textbbox((0, 0), letter, font=font)
            x = (28 - (right - left)) / 2 - left + rng.uniform(-2, 2)
            y = (28 - (bottom - top)) / 2 - top + rng.uniform(-2, 2)
            draw.text((x, y), letter, fill=int(rng.integers(180, 256)), font=font)
            with atomic_open(root / letter / f"{letter}{index:05d}.png") as handle:
                canvas.save(handle, format="PNG")
    return root
