"""The page at / in headless Chromium (Debian's chromium + chromium-driver, as the offline
attention page's test): type a text, submit, read the label, see the attention heatmap."""
import os
import shutil

import pytest
from conftest import running, wait_ready

from scratchformer.serve.app import create_app
from scratchformer.serve.state import ServeConfig
from scratchformer.serve.backends import ClassifierBackend

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver "
                                "(apt-get install chromium chromium-driver; .ci/run installs them)")


def test_page_types_submits_and_shows_label_and_attention(clf_run, tmp_path):
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    backend = ClassifierBackend("demo", clf_run)
    want = backend.clf.predict(["股市涨跌银行利率"])[0]["label"]
    os.environ.setdefault("SE_OFFLINE", "true")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1300,1400",
                 "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}"]:
        opts.add_argument(flag)
    with running(create_app(lambda: [backend], ServeConfig(api_key="k"))) as u:
        wait_ready(u)
        driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
        try:
            driver.get(u + "/")
            wait = WebDriverWait(driver, 30)
            # no key yet: /v1/models is guarded (it lists run folders), the server's 401 is shown
            wait.until(lambda d: d.find_element(By.ID, "error").text)
            assert driver.find_element(By.ID, "error").text.startswith("401: missing or wrong API key")
            assert not driver.find_elements(By.CSS_SELECTOR, "#model option")
            driver.find_element(By.ID, "text").send_keys("股市涨跌银行利率")
            driver.find_element(By.ID, "key").send_keys("k")
            driver.find_element(By.ID, "go").click()  # with the key: the models, then the answer
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
            wait.until(lambda d: d.find_element(By.ID, "label").text)
            assert driver.find_element(By.ID, "label").text == want
            wait.until(lambda d: d.find_element(By.ID, "attention-box").is_displayed())
            driver.switch_to.frame(driver.find_element(By.ID, "attention"))
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#matrix td.cell"))
            labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#matrix th.row")]
            assert labels == list("股市涨跌银行利率")
            driver.switch_to.default_content()
            # the label and the typed text are drawn with the server's CJK font (no empty boxes)
            wait.until(lambda d: set(want) <= set(d.execute_script("return document.body.dataset.font || ''")))
            assert driver.execute_script("return document.fonts.check('16px sf-cjk', arguments[0])", want)
            assert set("股市涨跌银行利率") <= set(driver.execute_script("return document.body.dataset.font"))
            shot = tmp_path / "serve_page.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
            keep = os.environ.get("SCRATCHFORMER_KEEP_SCREENSHOT")
            if keep:
                shutil.copyfile(shot, keep)
        finally:
            driver.quit()
