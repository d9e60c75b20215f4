"""The attention page in a real headless browser (Debian's chromium + chromium-driver, driven
by Selenium; nothing is downloaded). `.ci/run` installs both; without them this test skips."""
import os
import shutil

import pytest
import torch

from scratchformer.diagnostics.attention_html import write_html
from scratchformer.diagnostics.maps import AttentionResult, AttentionView

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
                                      "chromium-driver; .ci/run installs them)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1300,1100"]


def _result():
    tokens = list("火箭客场击败湖人")
    g = torch.Generator().manual_seed(0)
    layers = [torch.softmax(3 * torch.randn(3, len(tokens), len(tokens), generator=g), -1) for _ in range(2)]
    return AttentionResult("火箭客场击败湖人", [AttentionView("encoder self-attention", tokens, tokens, layers)],
                           task="classify"), layers


@pytest.fixture()
def browser(tmp_path):
    selenium = pytest.importorskip("selenium", reason="pip install -e '.[test]' brings selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for downloads
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    assert selenium.__version__
    yield driver
    driver.quit()


def test_page_switches_heads_shows_hover_and_loads_nothing(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    result, layers = _result()
    page = write_html(result, tmp_path / "html")
    browser.get(page.as_uri())
    shown = lambda: browser.execute_script(  # noqa: E731
        "return [...document.querySelectorAll('#matrix td.cell')].map(td => +td.dataset.w)")
    as_rows = lambda flat: torch.tensor(flat).view(8, 8)  # noqa: E731

    first = shown()
    assert torch.allclose(as_rows(first), layers[0][0], atol=1e-4)  # layer 1 head 1 by default
    Select(browser.find_element(By.ID, "head")).select_by_visible_text("head 2")
    second = shown()
    assert second != first
    assert torch.allclose(as_rows(second), layers[0][1], atol=1e-4)
    Select(browser.find_element(By.ID, "layer")).select_by_visible_text("layer 2")
    Select(browser.find_element(By.ID, "head")).select_by_visible_text("mean of heads")
    assert torch.allclose(as_rows(shown()), layers[1].mean(0), atol=1e-4)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#thumbs canvas")) == 2 * 4  # 3 heads + mean per layer

    cell = browser.find_element(By.CSS_SELECTOR, '#matrix td.cell[data-q="1"][data-k="6"]')
    ActionChains(browser).move_to_element(cell).perform()
    info = browser.find_element(By.ID, "info").text
    assert info.startswith("箭 (1) → 湖 (6): ") and abs(float(info.split(": ")[1]) - float(layers[1].mean(0)[1, 6])) < 1e-3
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#matrix th.row")]
    assert labels == list("火箭客场击败湖人")
    # offline: the page fetched no resource (no CDN, no font or script from the network)
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    shot = tmp_path / "attention_page.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
