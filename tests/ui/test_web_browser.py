"""The page of ``fanloop web --demo`` in a real browser: headless Chromium driven by Selenium.

The server is the real command in a subprocess; the browser types into the page as a person
would, and every wait is on a condition of the page (no sleeps). Skips only where Chromium,
chromedriver or Selenium are missing (``.ci/run`` installs them).

The first test takes the screenshot docs/ui.md and docs/cli.md show. It writes it to
docs/images/fanloop-web.png only when ``FANLOOP_UPDATE_SCREENSHOTS=1`` is set (a test run
leaves the source tree as it found it; docs/contributing.md says when to set it), and to the
test's temporary directory otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from web_process import WebServer, web_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "fanloop-web.png"
UPDATE_SCREENSHOTS = os.environ.get("FANLOOP_UPDATE_SCREENSHOTS") == "1"
WAIT = 30.0  # seconds: generous, the machine may be busy


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """Headless Chromium on a fresh profile; quit (with chromedriver) however the test ends."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
        "--window-size=1360,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER)
    try:
        driver = webdriver.Chrome(service=service, options=options)
    except WebDriverException as exc:
        service.stop()
        pytest.fail(f"Chromium did not start: {exc.msg}")
    try:
        yield driver
    finally:
        driver.quit()
        service.stop()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[WebServer]:
    home = tmp_path / "home"
    home.mkdir()
    web = WebServer("--demo", "--fast", env=web_env(home))  # no pauses: every wait is on the page
    try:
        yield web
    finally:
        code = web.stop(signal.SIGINT)
        assert code == 0, web.stderr
        assert "Traceback" not in web.stderr, web.stderr


def wait(driver: Any, condition: Any, message: str) -> Any:
    return WebDriverWait(driver, WAIT).until(condition, message)


def text_of(driver: Any, css: str) -> str:
    return " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))


def contains(css: str, text: str) -> Any:
    """A condition: some element matching ``css`` shows ``text``."""

    def check(driver: Any) -> bool:
        return any(text in e.text for e in driver.find_elements(By.CSS_SELECTOR, css))

    return check


def button(label: str) -> tuple[str, str]:
    return (By.XPATH, f"//button[normalize-space()='{label}']")


def ask(driver: Any, prompt: str) -> None:
    """Type ``prompt`` and press Enter, once the previous answer has finished."""
    wait(driver, ec.element_to_be_clickable((By.ID, "send")), "the last run never finished")
    box = wait(driver, ec.element_to_be_clickable((By.CSS_SELECTOR, "textarea#prompt")), "box")
    box.send_keys(prompt)
    box.send_keys(Keys.ENTER)  # Enter sends


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver: Any, web: WebServer) -> None:
    driver.get(web.url)
    wait(driver, contains("#model", "gpt-4o"), "the page never read /api/info")


def test_a_prompt_streams_sub_agents_run_side_by_side_and_an_approved_change_runs(
    demo: WebServer, tmp_path: Path
) -> None:
    with chromium(tmp_path / "profile") as driver:
        open_page(driver, demo)
        assert driver.find_element(By.CSS_SELECTOR, "#demo").is_displayed()

        box = driver.find_element(By.CSS_SELECTOR, "textarea#prompt")
        box.send_keys("hello,", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "who are you?")
        assert box.get_attribute("value") == "hello,\nwho are you?"  # Shift+Enter: a new line
        assert not driver.find_elements(By.CSS_SELECTOR, ".turn")  # nothing sent yet
        box.clear()

        ask(driver, "hello, who are you?")
        wait(driver, contains(".assistant .text", "two sub-agents work in parallel"), "no answer")
        assert "hello, who are you?" in text_of(driver, ".user")
        assert driver.find_element(By.CSS_SELECTOR, "textarea#prompt").get_attribute("value") == ""

        ask(driver, "plan a picnic for Saturday")
        wait(driver, contains(".assistant .text", "Both sub-agents are back"), "no plan")
        lanes = driver.find_elements(By.CSS_SELECTOR, ".turn:last-child .lane")
        assert len(lanes) == 2, [lane.text for lane in lanes]
        assert "Found the facts" in lanes[0].text + lanes[1].text
        assert "Found the risks" in lanes[0].text + lanes[1].text
        assert all(lane.get_attribute("data-state") == "done" for lane in lanes)

        ask(driver, "write a note: buy bread and cheese")
        approve = wait(driver, ec.element_to_be_clickable(button("Approve")), "no Approve")
        assert driver.find_element(*button("Deny")).is_displayed()
        tool = driver.find_element(By.CSS_SELECTOR, "details.tool[data-state='waiting']")
        assert "write_file" in tool.text and "notes.md" in tool.text
        picture = SCREENSHOT if UPDATE_SCREENSHOTS else tmp_path / SCREENSHOT.name
        assert driver.save_screenshot(str(picture)), "no screenshot"
        assert picture.read_bytes().startswith(b"\x89PNG")

        approve.click()
        wait(driver, contains(".assistant .text", "Done: notes.md"), "the change never ran")
        done = driver.find_element(By.CSS_SELECTOR, "details.tool[data-state='done'] .tool-result")
        assert done.get_attribute("textContent").strip()  # the tool's result is shown
        # usage and cost of the whole conversation (gpt-4o has a price in the table)
        wait(driver, lambda d: d.find_element(By.ID, "usage-cost").text != "$0.0000", "no cost")
        assert "tokens" in driver.find_element(By.ID, "usage-tokens").text

        assert console_errors(driver) == []


def reopen(driver: Any, title: str) -> None:
    """ "New chat", then the session titled ``title`` from the list."""
    driver.find_element(*button("New chat")).click()
    wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, ".turn"), "not cleared")
    listed = f"//ul[@id='session-list']//button[contains(., '{title}')]"

    def click_listed(d: Any) -> bool:
        try:
            d.find_element(By.XPATH, listed).click()
        except (NoSuchElementException, StaleElementReferenceException):
            return False  # not listed yet, or the list was just redrawn
        return True

    wait(driver, click_listed, "the session is not listed")
    wait(driver, contains(".user", title), "the history is not shown")


def test_a_denied_change_shows_the_reason_and_sessions_are_resumed(
    demo: WebServer, tmp_path: Path
) -> None:
    with chromium(tmp_path / "profile") as driver:
        open_page(driver, demo)
        ask(driver, "delete the old notes")
        wait(driver, ec.element_to_be_clickable(button("Deny")), "no Deny")

        # Leave the question unanswered: the session, opened again, asks it again.
        reopen(driver, "delete the old notes")
        wait(driver, ec.element_to_be_clickable(button("Deny")), "the question is not asked again")
        assert "write_file" in text_of(driver, "details.tool[data-state='waiting']")

        driver.find_element(By.CSS_SELECTOR, ".approval input.reason").send_keys("not today")
        driver.find_element(*button("Deny")).click()
        # the model read the reason: its answer quotes it
        wait(driver, contains(".assistant .text", "by the user: not today)."), "no answer to Deny")
        assert "left notes.md alone" in text_of(driver, ".assistant .text")
        assert "Denied: not today" in text_of(driver, ".approval .answer")
        declined = driver.find_element(By.CSS_SELECTOR, "details.tool[data-state='declined']")
        assert "not today" in declined.find_element(By.CSS_SELECTOR, ".tool-result").get_attribute(
            "textContent"
        )

        # Back to the session from the list: its history is shown and the next prompt
        # continues it.
        reopen(driver, "delete the old notes")
        assert "left notes.md alone" in text_of(driver, ".assistant .text")
        ask(driver, "thanks")
        wait(driver, contains(".assistant .text", "You said: “thanks”"), "no second answer")
        assert len(driver.find_elements(By.CSS_SELECTOR, ".user")) == 2

        assert console_errors(driver) == []
