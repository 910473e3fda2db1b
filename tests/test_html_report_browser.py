"""torchport-report/index.html in a real headless Chromium (Debian's package, driven by
Playwright): the page loads from file:// with no console error and no request but the file
itself, the verdict and an item left for a human are visible, and a screenshot of it is
kept as a test artefact ($TORCHPORT_TEST_ARTEFACTS, default tests/artefacts/).

Two real migrations: the bundled example (verified) and a small program whose port fails
(it asks the GPU for its generation, a construct left for a human)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from torchport.agents import graph, runs

EXAMPLE = Path(__file__).parents[1] / "examples" / "cuda_mnist"
CHROMIUM = os.environ.get("TORCHPORT_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FAILING = """\
import torch

major, minor = torch.cuda.get_device_capability()
model = torch.nn.Linear(8, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 8, device="cuda")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
"""
PNG = b"\x89PNG\r\n\x1a\n"

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright drives the browser: pip install -e '.[browser]'"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"Debian's chromium is not installed ({CHROMIUM}): make browser, or as root "
        "apt-get install -y chromium",
    ),
]


def artefacts() -> Path:
    folder = Path(os.environ.get("TORCHPORT_TEST_ARTEFACTS") or Path(__file__).parent / "artefacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def migrate(source: Path, out: Path) -> Path:
    """A real migration through the agent graph (rules only, 2 steps); its report folder."""
    settings = {"source": str(source), "target": "tpu", "out": str(out), "llm": "none"}
    graph.start({**settings, "steps": 2}, graph.Runtime(runs.new_run_id()))
    return out / "torchport-report"


def load(report: Path, screenshot: Path, user_data: Path) -> dict:
    """Open the page in Chromium; what it logged and asked for, and what a person sees."""
    seen: dict = {"console": [], "requests": [], "errors": []}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(user_data), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 900},
        )  # fmt: skip
        try:
            browser.on("request", lambda r: seen["requests"].append(r.url))
            page = browser.new_page()
            page.on("console", lambda m: seen["console"].append((m.type, m.text)))
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.goto((report / "index.html").as_uri(), wait_until="load")
            badge = page.locator("#verdict .badge")
            note = page.locator("tr.note").first
            seen["verdict"] = badge.inner_text() if badge.is_visible() else None
            seen["reason"] = page.locator("#verdict").inner_text()
            note.scroll_into_view_if_needed()
            seen["note"] = note.inner_text() if note.is_visible() else None
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return seen


def check(seen: dict, report: Path, screenshot: Path) -> None:
    assert seen["errors"] == [] and [m for m in seen["console"] if m[0] == "error"] == []
    assert set(seen["requests"]) == {(report / "index.html").as_uri()}
    data = screenshot.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000


def test_the_bundled_examples_page_in_chromium(tmp_path):
    report = migrate(EXAMPLE, tmp_path / "port")
    shot = artefacts() / "html-report-example.png"
    seen = load(report, shot, tmp_path / "profile")
    check(seen, report, shot)
    assert seen["verdict"] == "verified"
    assert "TPK013" in seen["note"] and "left for you" in seen["note"]  # run.sh's nvidia-smi


def test_a_failed_ports_page_in_chromium(tmp_path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(FAILING)
    report = migrate(source, tmp_path / "port")
    shot = artefacts() / "html-report-failed.png"
    seen = load(report, shot, tmp_path / "profile")
    check(seen, report, shot)
    assert seen["verdict"] == "failed" and "train.py:3" in seen["reason"]
    assert "TPD013" in seen["note"] and "left for you" in seen["note"]
