"""The page's script (serve/page/index.html) run by node under a minimal fake DOM and fetch
(tests/serve/page_harness.js): the flow a user meets with a key-guarded server, and that model
ids and labels go in as text. The Chromium test (test_page_browser.py) checks the real page
where Chromium is installed; this one runs wherever node is."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from scratchformer.serve import site

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs node (apt-get install nodejs)")


def test_page_asks_for_the_key_then_shows_ids_and_labels_as_text(tmp_path):
    page = (Path(site.__file__).parent / "page" / "index.html").read_text(encoding="utf-8")
    (tmp_path / "page.js").write_text(re.search(r"<script>(.*)</script>", page, re.S).group(1), encoding="utf-8")
    harness = Path(__file__).parent / "page_harness.js"
    run = subprocess.run([NODE, str(harness), str(tmp_path / "page.js")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    # /v1/models is guarded: without the key the page shows the server's 401 and no models
    assert out["initError"].startswith("401: missing or wrong API key") and out["optionsBeforeKey"] == 0
    # with the key: the models, the label, the probabilities; markup in ids and labels stays text
    assert out["options"] == [["option", "<img src=x onerror=1> (classify)", "<img src=x onerror=1>"]]
    assert out["label"] == "<b>pos</b>" and out["error"] == ""
    assert out["rows"] == [["<b>pos</b>", "0.700", "140px"], ["neg&", "0.300", "60px"]]
    assert out["attention"] == "block" and out["font"] == "市股"
    # every call after the key carries it, the font included (it is fetched, not a CSS url)
    assert out["calls"] == [["/v1/models", None, None], ["/v1/models", "Bearer k", None],
                            ["/font?text=%E5%B8%82%E8%82%A1", "Bearer k", None],
                            ["/v1/classify", "Bearer k", "application/json"],
                            ["/v1/attention", "Bearer k", "application/json"]]
