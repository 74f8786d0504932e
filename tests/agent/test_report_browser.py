"""report.html in a real headless browser (Debian's chromium): it renders, every plot image
loads (naturalWidth > 0), nothing is logged as an error. The screenshot stays under the test's
tmp_path as an artifact and its path is printed (pytest -s, or the captured output on failure)."""
import json
import shutil

import pytest

from agent import report
from agent.run import start
from agent.ledger import Ledger
from tests.agent.browser import chromium, open_page
from tests.agent.conftest import fake_factory, fake_suite, small_config
from tools.hardware import get_hardware

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed "
                                "(apt-get install -y chromium; .ci/run installs it where apt works)")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser") / "run"
    out = start(small_config(), d, sandbox_factory=fake_factory(), suite_factory=fake_suite)
    assert out["status"] == "done"
    return d


def _check(path, shot, want_images):
    page = open_page(path, shot)
    print(f"\nscreenshot: {shot}")
    assert page.errors == []
    assert sorted(i["alt"] for i in page.images) == sorted(want_images)
    assert all(i["complete"] and i["naturalWidth"] > 0 and i["naturalHeight"] > 0 for i in page.images), page.images
    assert page.text_chars > 500 and page.title == "inferloop report"
    assert shot.stat().st_size > 10_000  # a blank page compresses to far less
    return page


def test_report_renders_with_its_plots(run_dir, tmp_path):
    _check(run_dir / "report.html", tmp_path / "report.png", ["frontier.png", "ttft.png", "trials.png"])
    # Self-contained: no file the page points at is needed once it is copied elsewhere.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run_dir / "report.html", alone / "report.html")
    _check(alone / "report.html", tmp_path / "alone.png", ["frontier.png", "ttft.png", "trials.png"])


def test_measured_run_shows_its_share_of_the_roofline(run_dir, tmp_path):
    d = tmp_path / "measured"
    shutil.copytree(run_dir, d)
    led = Ledger(d)
    cfg = led.meta("config")
    led.set_meta("config", {**cfg, "backend": "local"})  # as if measured on a real H200 node
    led.close()
    report.write(d, get_hardware("h200"))
    res = json.loads((d / "result.json").read_text())
    assert 0 < res["roofline"]["decode"]["share"] and 0 < res["roofline"]["prefill"]["share"]
    assert "Roofline, decode:" in (d / "report.md").read_text()
    _check(d / "report.html", tmp_path / "measured.png", ["frontier.png", "ttft.png", "trials.png", "roofline.png"])


def test_the_browser_check_fails_on_a_broken_page(tmp_path):
    """The check above can fail: a missing image and a console error are both seen."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!doctype html><title>x</title><img src="missing.png" alt="m"><script>console.error("boom")</script>')
    page = open_page(bad, tmp_path / "bad.png")
    assert page.images[0]["naturalWidth"] == 0
    assert any("boom" in e for e in page.errors) and any("load failed" in e for e in page.errors)
