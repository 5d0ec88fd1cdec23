"""The documentation site: it builds in strict mode, its API reference covers the public names,
nothing in it loads from outside the site, and a reader's browser can use it.

The browser test serves the built site on 127.0.0.1 and drives Debian's `chromium` through its
`chromedriver` (packages `chromium` and `chromium-driver`; selenium from PyPI, no browser
download), with the launch flags of the eval report's test. It clicks through every entry of
the navigation, searches for `SourceQuote`, and reads the browser's own logs: every request
any page made (the DevTools `Network.requestWillBeSent` events) must be to the site, and no
page may log a console error. Without Chromium or its driver the test is skipped, except in
CI, where it fails.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.local_deps import in_ci

REPO = Path(__file__).resolve().parent.parent
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]
REFERENCE = {
    "sdk": "sdk",
    "providers": "sdk.providers",
    "errors": "sdk.errors",
    "hooks": "sdk.hooks",
    "telemetry": "sdk.telemetry",
    "schema": "sdk.schema",
    "abstention": "sdk.abstention",  # issue 32: thresholds set by hand, in the reference
}
# The one outside address a page may spell: the SVG namespace of the theme's inline icons.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MKDOCS, "--site-dir", str(site)], cwd=config_dir, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once per session (strict) into a temporary folder."""
    folder = tmp_path_factory.mktemp("site")
    built = _build(REPO, folder)
    assert built.returncode == 0, built.stderr[-4000:]
    return folder


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


class _Attributes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.values: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.values.extend((tag, name, value) for name, value in attrs if value)


def test_every_public_name_has_its_reference_entry(site: Path) -> None:
    import importlib

    for page, module_name in REFERENCE.items():
        module = importlib.import_module(module_name)
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        anchors = set(re.findall(r'id="(sdk\.[\w.]+)"', html))
        missing = [
            name
            for name in module.__all__
            if name != "__version__" and not any(a.endswith(f".{name}") for a in anchors)
        ]
        assert missing == [], f"{module_name}: no reference entry for {missing}"


def test_no_page_points_outside_the_site(site: Path) -> None:
    pages = _pages(site)
    assert len(pages) >= 20
    for page in pages:
        html = page.read_text(encoding="utf-8")
        parser = _Attributes()
        parser.feed(html)
        outside = [
            (tag, name, value)
            for tag, name, value in parser.values
            if re.match(r"\s*(https?:)?//", value) and value != SVG_NAMESPACE
        ]
        assert outside == [], f"{page.relative_to(site)}: {outside[:5]}"
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html


def _strict_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(REPO / "docs", copy / "docs")
    # mkdocstrings reads the sources beside mkdocs.yml; pages include generated files from
    # bench/ and eval-results/ (pymdownx.snippets, a missing one fails the build).
    for folder in ("sdk", "contracts", "bench", "eval-results"):
        (copy / folder).symlink_to(REPO / folder)
    return copy


@pytest.mark.parametrize(
    ("addition", "named"),
    [
        ("See [the batch guide](guides/batches.md).", "guides/batches.md"),
        ("See [the anchor](guides/errors.md#no-such-section).", "no-such-section"),
        ("See [`Nope`][sdk.Nope].", "sdk.Nope"),
    ],
    ids=["missing-page", "missing-anchor", "missing-api-reference"],
)
def test_a_broken_link_or_reference_fails_the_build(
    tmp_path: Path, addition: str, named: str
) -> None:
    copy = _strict_copy(tmp_path)
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text(encoding="utf-8") + f"\n{addition}\n", encoding="utf-8")
    built = _build(copy, tmp_path / "site")
    assert built.returncode != 0
    assert named in built.stderr


# --- a real browser ----------------------------------------------------------------------------


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (Path(chromium).exists() and Path(driver).exists()):
        reason = "no chromium or chromedriver (apt-get install chromium chromium-driver)"
        if in_ci():
            pytest.fail(f"CI must run the browser test, but {reason}", pytrace=False)
        pytest.skip(reason)
    return chromium, driver


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (search needs http, not file://)."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    chromium, driver_path = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'profile'}"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _requests(driver: Any, root: str) -> list[str]:
    """The URLs the site's pages asked for since the last call (DevTools network events of the
    documents under `root`; Chromium's own pages, such as its first new-tab page, are not the
    site's)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            params = message["params"]
            if params.get("documentURL", "").startswith(root):
                urls.append(params["request"]["url"])
    return urls


def _console_errors(driver: Any) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _click_through_the_nav(driver: Any, root: str) -> list[str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    driver.get(root)
    links = driver.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link[href]")
    targets = list(dict.fromkeys(link.get_attribute("href") for link in links))
    assert len(targets) >= 20, targets
    visited = []
    for target in targets:
        link = next(
            link for link in driver.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a[href]")
            if link.get_attribute("href") == target
        )  # fmt: skip
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
        if link.is_displayed():
            link.click()
        else:  # inside a collapsed section: open it as a reader would, then click
            driver.execute_script("arguments[0].click()", link)
        WebDriverWait(driver, 20).until(expected_conditions.url_to_be(target))
        heading = driver.find_element(By.CSS_SELECTOR, "article h1")
        assert heading.text.strip(), f"{target} has no title"
        visited.append(target)
    return visited


def _search(driver: Any, root: str, term: str) -> list[tuple[str, str]]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    driver.get(root)
    box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    if not box.is_displayed():  # a narrow window: the header's search button opens the box
        driver.find_element(By.CSS_SELECTOR, "label.md-header__button[for='__search']").click()
    WebDriverWait(driver, 20).until(lambda d: box.is_displayed())
    box.click()
    box.send_keys(term)
    results = WebDriverWait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")
    )
    return [(r.get_attribute("href"), r.text) for r in results]


def test_a_reader_can_navigate_and_search_and_nothing_leaves_the_site(
    browser: Any, served: str
) -> None:
    visited = _click_through_the_nav(browser, served)
    assert f"{served}guides/errors/" in visited and f"{served}reference/sdk/" in visited
    requests = _requests(browser, served)
    errors = _console_errors(browser)

    found = _search(browser, served, "SourceQuote")
    assert any("SourceQuote" in text for _, text in found), found
    assert any("/reference/" in href for href, _ in found), found
    requests += _requests(browser, served)
    errors += _console_errors(browser)

    assert any(url.startswith(f"{served}assets/") for url in requests)  # the log sees requests
    outside = [url for url in requests if not url.startswith((served, "data:", "blob:", "about:"))]
    assert outside == []
    assert errors == []

    # The control: a page that does reach outside, and logs an error, is seen doing both.
    browser.execute_script(
        "document.body.insertAdjacentHTML('beforeend', "
        "'<img src=\"http://docs-site-test.example/pixel.png\">'); console.error('control')"
    )
    browser.execute_script("return new Promise(done => setTimeout(done, 500))")
    assert any("docs-site-test.example" in url for url in _requests(browser, served))
    assert any("control" in message for message in _console_errors(browser))
