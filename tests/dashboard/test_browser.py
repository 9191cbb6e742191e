"""A real browser (Debian chromium via Playwright) drives the dashboard against a live cache.

The page polls at 10 updates/s (``?interval=100``) throughout, so the Configure steps also show
that the page stays usable at that rate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import GB, load_config_dict
from playwright.sync_api import Browser, Page, expect, sync_playwright

from lifeboatcache.dashboard import DashboardHandle, start_dashboard
from lifeboatcache.dashboard.metrics_node import ENV_SPOOL

from .helpers import BLOCK, TOKEN, keys, open_cache, traffic

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
expect.set_options(timeout=20_000)  # CI shares two cores; the page itself updates every 100 ms
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "Debian chromium is installed by .ci/setup.d/40-browser.sh"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TieredCache, DashboardHandle]]:
    monkeypatch.setenv(ENV_SPOOL, str(tmp_path / "spool"))
    with open_cache(tmp_path, dashboard={"token": TOKEN}) as cache:
        handle = start_dashboard(cache, port=0)
        try:
            assert handle.wait_serving(15), handle.failed
            yield cache, handle
        finally:
            handle.stop()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def test_live_numbers_and_configure_tab(page: Page, served: tuple[TieredCache, DashboardHandle]) -> None:
    cache, handle = served
    page.goto(f"{handle.url}?interval=100#token={TOKEN}")
    expect(page.locator("#lookups")).to_have_text("0")
    expect(page.locator("#tiers tbody tr")).to_have_count(1)
    expect(page.locator("#tiers tbody tr td").nth(2)).to_have_text("up")

    # cache traffic: the numbers change without a reload
    traffic(cache, stored=6, looked_up=8)
    expect(page.locator("#lookups")).to_have_text("8")
    expect(page.locator("#hit-rate")).to_have_text("75.0 %")
    expect(page.locator("#bytes-served")).to_have_text("24.0 KiB")
    expect(page.locator("#tiers tbody tr td").nth(4)).to_have_text("6")
    assert page.locator("#chart-hit path").get_attribute("d")

    # Configure: the token came from the URL fragment and left the address bar
    page.click("#tab-configure")
    assert "token" not in page.url
    expect(page.locator("#token")).to_have_value(TOKEN)
    capacity = page.locator('input[data-loc="tiers.0.capacity_gb"]')
    expect(capacity).to_have_value("1")

    # a bad value: inline error next to the field, nothing applied
    capacity.fill("-5")
    page.click("#validate")
    error = page.locator('.field-error[data-for="tiers.0.capacity_gb"]')
    expect(error).to_have_text("Input should be greater than 0")
    expect(capacity).to_have_class("invalid")
    page.click("#apply")
    expect(page.locator("#config-result")).to_contain_text("not applied")
    assert cache.config.tiers[0].capacity_gb == 1

    # without the token the write is refused
    capacity.fill("2.5")
    page.fill("#token", "")
    page.click("#apply")
    expect(page.locator("#config-result")).to_contain_text("refused (401)")
    assert cache.all_tiers[0].capacity == 1024**3

    # a good value with the token: applied live, the running cache reflects it
    page.fill("#token", TOKEN)
    page.click("#apply")
    expect(page.locator("#config-result")).to_contain_text("tier nvme: capacity 1 GB -> 2.5 GB")
    expect(error).to_have_text("")
    assert cache.all_tiers[0].capacity == int(2.5 * 1024**3)
    assert cache.config.tiers[0].capacity_gb == 2.5
    expect(page.locator('input[data-loc="tiers.0.capacity_gb"]')).to_have_value("2.5")

    # the overview shows the new capacity and the change as an event
    page.click("#tab-overview")
    expect(page.locator("#tiers tbody tr td").nth(3)).to_contain_text("/ 2.5 GiB")
    expect(page.locator("#events")).to_contain_text("capacity 1 GB -> 2.5 GB")


def test_restart_only_change_is_said_so(page: Page, served: tuple[TieredCache, DashboardHandle]) -> None:
    cache, handle = served
    page.goto(f"{handle.url}?interval=100#token={TOKEN}")
    page.click("#tab-configure")
    page.fill('input[data-loc="tiers.0.io_threads"]', "2")
    page.click("#apply")
    expect(page.locator("#config-result")).to_contain_text("needs a restart (kept as running):")
    expect(page.locator("#config-result")).to_contain_text("tier nvme: io_threads 4 -> 2 needs a restart")
    assert cache.config.tiers[0].io_threads == 4
    page.click("#reload")
    expect(page.locator("#config-result")).to_contain_text("waiting for a restart")


def test_add_and_remove_a_tier_from_the_page(page: Page, served: tuple[TieredCache, DashboardHandle]) -> None:
    cache, handle = served
    page.goto(f"{handle.url}?interval=100#token={TOKEN}")
    page.click("#tab-configure")
    expect(page.locator('input[data-loc="tiers.0.capacity_gb"]')).to_have_value("1")
    page.click("#add-tier")
    page.fill('input[data-loc="tiers.1.name"]', "ram2")
    page.fill('input[data-loc="tiers.1.capacity_gb"]', "0.5")
    page.click("#apply")
    expect(page.locator("#config-result")).to_contain_text("tier ram2 added (dram, 0.5 GB)")
    assert [t.name for t in cache.all_tiers] == ["nvme", "ram2"] and cache.all_tiers[1].up
    page.locator('fieldset[data-loc="tiers.1"] .remove-tier').click()
    page.click("#apply")
    expect(page.locator("#config-result")).to_contain_text("tier ram2 removed")
    assert [t.name for t in cache.all_tiers] == ["nvme"]


def test_staging_row_and_chart(page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overview's staging row follows the counters: staged, used, wasted, held; the chart draws."""
    monkeypatch.setenv(ENV_SPOOL, str(tmp_path / "spool"))
    data = {"tiers": [{"name": "dram", "backend": "dram", "capacity_gb": 64 * BLOCK / GB, "stage": True},
                      {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tmp_path / "tier")}],
            "fallback_local": {"path": str(tmp_path / "fallback"), "capacity_gb": 1}, "dashboard": {"token": TOKEN}}
    with TieredCache(load_config_dict(data), background_index=False) as cache:
        handle = start_dashboard(cache, port=0)
        try:
            assert handle.wait_serving(15), handle.failed
            page.goto(f"{handle.url}?interval=100")
            expect(page.locator("#staged-bytes")).to_have_text("0 B")
            ks = keys(4)
            cache.put(ks, [os.urandom(BLOCK) for _ in ks], hints=[BlockHint(tag="s1", depth=i) for i in range(4)])
            cache.all_tiers[0].discard(ks)
            assert cache.stage("s1", 0) == 4 and cache.stager.wait_idle(30)
            expect(page.locator("#staged-bytes")).to_have_text("16.0 KiB")
            expect(page.locator("#staged-held")).to_have_text("16.0 KiB")
            assert cache.get(ks[:1], [bytearray(BLOCK)]) == [True]
            cache.release("s1")
            assert cache.stager.wait_idle(30)
            expect(page.locator("#staged-used")).to_have_text("4.0 KiB (25.0 %)")
            expect(page.locator("#staged-wasted")).to_have_text("12.0 KiB (75.0 %)")
            expect(page.locator("#staged-held")).to_have_text("0 B")
            expect(page.locator("#staged-late")).to_have_text("0")
            assert page.locator("#chart-staging path.staged").get_attribute("d")
            assert page.locator("#chart-staging path.wasted").get_attribute("d")
        finally:
            handle.stop()
