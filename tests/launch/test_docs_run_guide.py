"""The getting-started page's runnable blocks run as written (tests/launch/test_docs_run.py says how; this page,
the longest, runs from its own file so that it runs beside the other pages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import install_wheel
from tests.formats import write_stand_ins
from tests.launch.test_docs_run import GUIDE, RUN_PAGES, run_page


@pytest.mark.timeout(900)
def test_the_getting_started_pages_runnable_blocks_run_as_written(tmp_path_factory, tmp_path):
    assert GUIDE in RUN_PAGES
    installed: Path = install_wheel(tmp_path_factory.mktemp("install"), studies=True)
    run_page(installed, write_stand_ins(tmp_path_factory.mktemp("data")), tmp_path, GUIDE)
