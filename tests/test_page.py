"""The playground page (`GET /` of `kokoro-tvm serve`) in a real browser: Debian's headless
Chromium driven by Playwright, against the real server on the real-weight model folder of
the tests' main-command build. The page lists the server's voices, speaks as the audio streams,
lights the words as they are spoken, downloads what it played and shows the server's error
messages; it asks nothing of any other origin.
"""
from __future__ import annotations

import re
import time

import httpx
import pytest
from conftest import launched_chromium, model_folder, only_origin
from test_serve_parts import decode

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure.bench_serve import Server
from kokoro_tvm.runtime.kokoro import Kokoro

pytestmark = pytest.mark.slow

SENTENCE = "The quick brown fox jumps over the lazy dog, and then it runs away."
AUTOPLAY = "--autoplay-policy=no-user-gesture-required"  # the test presses no key in the audio
PLAYING = "document.getElementById('audio').currentTime > {seconds}"
SPAN_TEXTS = "spans => spans.map(s => s.textContent)"


@pytest.fixture(scope="module")
def server(real_built, tmp_path_factory):
    log = tmp_path_factory.mktemp("page") / "server.log"
    with Server(model_folder(real_built), log) as running:
        yield running


@pytest.fixture(scope="module")
def browser(chromium):
    with launched_chromium(chromium, [AUTOPLAY]) as launched:
        yield launched


@pytest.fixture
def page(browser, server):
    """The page, loaded with its voices; every request it makes to another origin is refused
    and recorded in ``page.foreign``."""
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.foreign = only_origin(page, server.url)
    page.goto(server.url + "/")
    page.wait_for_function("document.querySelectorAll('#voice option').length > 0")
    yield page
    context.close()


def words_of(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


def test_page_speaks_streams_highlights_and_downloads(page, server, real_built, tmp_path):
    listed = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    offered = page.eval_on_selector_all("#voice option", "options => options.map(o => o.value)")
    assert offered == [v["id"] for v in listed if v["available"]]

    # Every control is reached by its label, as a screen reader would.
    page.get_by_label("Voice", exact=True).select_option("am_adam")
    page.get_by_label("Format", exact=True).select_option("mp3")
    page.get_by_label("Speed", exact=True).fill("1")
    page.get_by_label("Text", exact=True).fill(SENTENCE)
    page.get_by_label("Text", exact=True).press("Control+Enter")

    page.wait_for_function(PLAYING.format(seconds=0.2), timeout=60_000)
    lit, deadline = set(), time.monotonic() + 60
    while not page.evaluate("document.getElementById('audio').ended"):
        assert time.monotonic() < deadline, "the audio did not play to its end in 60 s"
        current = page.eval_on_selector_all(".word.current", SPAN_TEXTS)
        if current and not lit:  # the page as it plays, a word lit
            page.screenshot(path=str(tmp_path / "playground.png"), full_page=True)
        lit.update(current)
        page.wait_for_timeout(50)
    assert len(lit) >= 3, f"words lit while playing: {sorted(lit)}"
    shown = page.eval_on_selector_all(".word", SPAN_TEXTS)
    assert words_of(" ".join(shown)) == words_of(SENTENCE)
    assert page.text_content("#error") == ""

    with page.expect_download() as downloading:
        page.get_by_role("button", name="Download").click()
    saved = tmp_path / downloading.value.suggested_filename
    downloading.value.save_as(saved)
    assert saved.name == "speech.mp3"
    samples, rate = decode(saved.read_bytes(), "mp3")
    expected = Kokoro(model_folder(real_built)).create(SENTENCE, voice="am_adam")[0]
    assert rate == SAMPLE_RATE
    # mp3 adds an encoder delay and pads its last frame: within 0.1 s of the samples spoken.
    assert abs(len(samples) - len(expected)) / SAMPLE_RATE < 0.1
    assert page.foreign == []


def test_page_blends_voices_in_a_format_played_whole(page):
    page.get_by_label("Voice", exact=True).select_option("af_heart")
    page.get_by_label("Blend with", exact=True).select_option("am_adam")
    page.get_by_label("Second voice's weight", exact=True).fill("0.5")
    assert page.text_content("#weight-value") == "0.50"
    page.get_by_label("Format", exact=True).select_option("wav")
    page.get_by_label("Text", exact=True).fill("A blend of two voices.")
    page.get_by_role("button", name="Speak").click()
    page.wait_for_function(PLAYING.format(seconds=0.2), timeout=60_000)
    assert page.text_content("#error") == ""


def test_page_shows_the_servers_error(page, server):
    body = {"model": "kokoro", "input": "   ", "voice": "af_heart"}
    message = httpx.post(f"{server.url}/v1/audio/speech", json=body).json()["error"]["message"]
    page.get_by_label("Text", exact=True).fill("   ")
    page.get_by_role("button", name="Speak").click()
    page.wait_for_function("document.getElementById('error').textContent.length > 0")
    assert page.text_content("#error") == message
    assert page.get_by_role("button", name="Speak").is_enabled()
