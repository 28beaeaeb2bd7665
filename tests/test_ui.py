"""/ui, the live trace page: its JSON API, who may see it, its bounded buffer, and the page itself
in a real headless Chromium (skipped without one unless LAVA_REQUIRE_SYSTEM_TOOLS=1)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from fastapi.testclient import TestClient

from conftest import user_input
from lava.app import create_app
from lava.backends.scripted import FunctionBackend
from lava.settings import Settings
from lava.traces import TraceBuffer, memory_diff
from servers import uvicorn_thread

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOOPBACK = ("127.0.0.1", 40000)
HOSTILE = '<script>window.__lava_pwned = 1</script><img src=x onerror="window.__lava_pwned = 2"> not a decision'
PRESS_SW1 = {"tool_calls": [{"robot": "panda", "name": "press_button", "arguments": {"id": "sw1"}}]}


def body(*inputs: dict[str, Any], request_id: str = "req-1") -> dict[str, Any]:
    return {"request_id": request_id, "inputs": list(inputs)}


def scripted_app(tmp_path: Path, **overrides: Any):
    """Turn 0: candidate 0 presses sw1, candidate 1 answers hostile markup (an error, repairs off);
    turn 1 says hello with markup in it."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[PRESS_SW1, HOSTILE], {"say": "Hello <b>operator</b>"}]))
    return create_app(Settings(backend="scripted", policy="full_history", script=script, repair_attempts=0,
                               **overrides))


def one_turn_memory() -> dict[str, Any]:
    return {"history": [{"author": "USER", "content": "hi"}, {"author": "MODEL", "content": '{"say": "hi"}'}]}


def test_the_api_lists_each_candidate_newest_first_and_filters_by_status(tmp_path) -> None:
    with TestClient(scripted_app(tmp_path), client=LOOPBACK) as client:
        assert client.post("/v1/responses", json=body(user_input(n=2), request_id="first")).status_code == 200
        client.post("/v1/responses", json=body(user_input("greet", id=4, memory=one_turn_memory()),
                                               request_id="second"))
        listing = client.get("/ui/api/exchanges").json()
        errors = client.get("/ui/api/exchanges", params={"status": "error"}).json()
        completed = client.get("/ui/api/exchanges", params={"status": "completed"}).json()

    assert listing["counts"] == {"all": 3, "completed": 2, "error": 1}
    assert [(row["request_id"], row["source_id"], row["candidate_index"]) for row in listing["exchanges"]] == [
        ("second", 4, 0), ("first", 0, 0), ("first", 0, 1)]
    assert [row["status"] for row in errors["exchanges"]] == ["error"]
    assert errors["exchanges"][0]["code"] == "invalid_output"
    assert {row["status"] for row in completed["exchanges"]} == {"completed"}
    assert listing["exchanges"][1]["decision"] == "panda.press_button(id='sw1')"
    assert listing["exchanges"][1]["instruction"] == "Please press sw1"


def test_the_detail_has_the_prompt_raw_output_decision_and_memory_diff(tmp_path) -> None:
    memory = {**one_turn_memory(), "memory_list": ["be brief"], "custom": 1}
    with TestClient(scripted_app(tmp_path), client=LOOPBACK) as client:
        answer = client.post("/v1/responses", json=body(user_input("greet", memory=memory))).json()
        detail = client.get("/ui/api/exchanges/1/0").json()
        assert client.get("/ui/api/exchanges/1/1").status_code == 404
        assert client.get("/ui/api/exchanges/9/0").status_code == 404

    assert detail["input"]["instruction"] == {"type": "user", "content": "greet"}
    assert [tool["name"] for tool in detail["input"]["tools"]] == ["cancel_current_action", "press_button"]
    assert detail["output"] == answer[0]["output"] == {"say": "Hello (b)operator(/b)", "tool_calls": []}
    (step,) = detail["internal_steps"]
    assert "greet" in step["full_prompt"] and step["output_raw"] == '{"say": "Hello <b>operator</b>"}'
    assert detail["input_tokens"] == step["total_input_tokens"] > 0
    changes = detail["memory_diff"]["changes"]
    assert [(c["path"], c["op"]) for c in changes] == [("history[2]", "added"), ("history[3]", "added")]
    assert changes[0]["after"] == {"author": "USER", "content": "greet"}


def test_an_error_candidate_shows_its_error_and_no_memory_change(tmp_path) -> None:
    with TestClient(scripted_app(tmp_path), client=LOOPBACK) as client:
        client.post("/v1/responses", json=body(user_input(n=2)))
        detail = client.get("/ui/api/exchanges/1/1").json()
    assert detail["status"] == "error" and detail["output"] is None
    assert detail["error"]["code"] == "invalid_output"
    assert detail["internal_steps"][0]["output_raw"] == HOSTILE
    assert detail["memory_diff"] == {"changes": [], "truncated": False}


def test_memory_diff_reads_objects_by_key_and_lists_by_position() -> None:
    before = {"history": [{"content": "a"}], "summary": "old", "gone": 1, "same": [1, 2]}
    after = {"history": [{"content": "b"}, {"content": "c"}], "summary": "new", "same": [1, 2], "lava": {"k": 1}}
    assert memory_diff(before, after)["changes"] == [
        {"path": "history[0].content", "op": "changed", "before": "a", "after": "b"},
        {"path": "history[1]", "op": "added", "before": None, "after": {"content": "c"}},
        {"path": "summary", "op": "changed", "before": "old", "after": "new"},
        {"path": "gone", "op": "removed", "before": 1, "after": None},
        {"path": "lava", "op": "added", "before": None, "after": {"k": 1}},
    ]
    assert memory_diff({"n": 1}, {"n": True})["changes"][0]["op"] == "changed"  # 1 == True, but not the same JSON
    many = memory_diff([], list(range(10)), limit=4)
    assert len(many["changes"]) == 4 and many["truncated"]


def test_the_buffer_keeps_the_newest_requests_within_its_count_and_bytes() -> None:
    def request(i: int) -> bytes:
        return json.dumps(body(user_input(), request_id=f"r{i}")).encode()

    def answer(i: int) -> bytes:
        return json.dumps([{"request_id": f"r{i}", "source_id": 0, "candidate_index": 0, "status": "completed",
                            "memory": {}, "internal_steps": [], "output": {"say": "ok", "tool_calls": []},
                            "error": None}]).encode()

    size = len(request(0)) + len(answer(0))
    by_count = TraceBuffer(capacity=3, max_bytes=10**9)
    by_bytes = TraceBuffer(capacity=100, max_bytes=int(2.5 * size))
    for i in range(6):
        by_count.record(request(i), answer(i), received=0.0, duration_s=0.0)
        by_bytes.record(request(i), answer(i), received=0.0, duration_s=0.0)
    assert [row["request_id"] for row in by_count.summaries()["exchanges"]] == ["r5", "r4", "r3"]
    assert [row["request_id"] for row in by_bytes.summaries()["exchanges"]] == ["r5", "r4"]
    huge = TraceBuffer(capacity=100, max_bytes=10)
    huge.record(request(7), answer(7), received=0.0, duration_s=0.0)
    assert len(huge) == 1  # the newest request is always kept, however large


def test_a_zero_sized_buffer_records_nothing(tmp_path) -> None:
    with TestClient(scripted_app(tmp_path, trace_buffer_size=0), client=LOOPBACK) as client:
        client.post("/v1/responses", json=body(user_input()))
        listing = client.get("/ui/api/exchanges").json()
        assert client.app.state.runtime.traces is None
    assert listing["enabled"] is False and listing["exchanges"] == []


@pytest.mark.parametrize("client, headers, allow_remote, expected", [
    (("127.0.0.1", 40000), {}, False, 200),
    (("::1", 40000), {}, False, 200),
    (("::ffff:127.0.0.1", 40000), {}, False, 200),
    (("10.1.2.3", 40000), {}, False, 403),
    (("192.168.0.7", 40000), {}, False, 403),
    (("testclient", 50000), {}, False, 403),
    (("127.0.0.1", 40000), {"X-Forwarded-For": "203.0.113.9"}, False, 403),
    (("127.0.0.1", 40000), {"Forwarded": "for=203.0.113.9"}, False, 403),
    (("10.1.2.3", 40000), {}, True, 200),
])
def test_only_loopback_clients_see_the_ui_unless_allowed(client, headers, allow_remote, expected) -> None:
    app = create_app(Settings(backend="scripted", policy="full_history", ui_allow_remote=allow_remote))
    with TestClient(app, client=client) as test_client:
        test_client.post("/v1/responses", json=body(user_input()))
        for path in ("/ui", "/ui/api/exchanges", "/ui/api/exchanges/1/0"):
            assert test_client.get(path, headers=headers).status_code == expected, path
        # The agent protocol itself is not restricted.
        assert test_client.get("/v1/info", headers=headers).status_code == 200


def test_the_ui_needs_the_bearer_token_when_one_is_set() -> None:
    app = create_app(Settings(backend="scripted", policy="full_history", auth_token="a-long-enough-token"))
    with TestClient(app, client=LOOPBACK) as client:
        assert client.get("/ui").status_code == 401
        assert client.get("/ui/api/exchanges").status_code == 401
        authorized = {"Authorization": "Bearer a-long-enough-token"}
        assert client.get("/ui", headers=authorized).status_code == 200
        assert client.get("/ui/api/exchanges", headers=authorized).status_code == 200


def test_api_keys_never_reach_the_ui(make_client) -> None:
    secret = "sk-test-0123456789abcdef"

    def leaky(request):
        return [f"my key is {secret}, and no decision"] * request.n

    settings = Settings(backend="scripted", policy="full_history", openai_api_key=secret)
    client = TestClient(create_app(settings, backend=FunctionBackend(leaky)), client=LOOPBACK)
    with client:
        client.post("/v1/responses", json=body(user_input()))
        texts = [client.get("/ui/api/exchanges").text, client.get("/ui/api/exchanges/1/0").text]
    assert all(secret not in text for text in texts)
    assert "[redacted]" in texts[1]


def test_the_page_is_self_contained_and_locks_down_scripts(tmp_path) -> None:
    with TestClient(scripted_app(tmp_path), client=LOOPBACK) as client:
        page = client.get("/ui")
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "http://" not in html and "https://" not in html  # no CDN, nothing fetched from elsewhere
    assert ".innerHTML" not in html and "insertAdjacentHTML" not in html
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "'unsafe-inline'" not in policy and "script-src 'sha256-" in policy


# -- the page in a real browser

def chromium_or_skip():
    problem = None
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        problem = "playwright is not installed (pip install 'lava-agent[test]')"
        expect = sync_playwright = None
    if problem is None and not CHROMIUM.exists():
        problem = f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    if problem is not None:
        if os.environ.get("LAVA_REQUIRE_SYSTEM_TOOLS") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    return sync_playwright, expect


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_trace_page_in_chromium(tmp_path) -> None:
    sync_playwright, expect = chromium_or_skip()
    app = scripted_app(tmp_path)
    with uvicorn_thread(app) as url, sync_playwright() as playwright:
        httpx.post(f"{url}/v1/responses", json=body(user_input(n=2), request_id="first-request"), timeout=30)
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
            page.goto(f"{url}/ui")
            rows = page.get_by_test_id("exchange-row")
            expect(rows).to_have_count(2)

            # Live: a new exchange appears without reloading.
            second = user_input("Say hello to the operator", id=7, memory=one_turn_memory())
            httpx.post(f"{url}/v1/responses", json=body(second, request_id="second-request"), timeout=30)
            expect(rows).to_have_count(3, timeout=10_000)
            assert "second-request" in rows.first.inner_text()

            page.get_by_test_id("filter-error").click()
            expect(rows).to_have_count(1)
            expect(rows.first).to_have_attribute("data-status", "error")
            assert page.get_by_test_id("filter-error").inner_text().endswith("1")
            rows.first.click()
            page.get_by_test_id("detail-error").wait_for()
            assert "invalid_output" in page.get_by_test_id("detail-error").inner_text()
            raw = page.get_by_test_id("detail-raw").first
            assert raw.inner_text() == HOSTILE  # the markup is shown as text ...
            assert page.evaluate("window.__lava_pwned") is None  # ... and never ran
            assert page.locator("#detail script, #detail img").count() == 0
            assert "no change" in page.get_by_test_id("detail-memory-diff").inner_text()

            page.get_by_test_id("filter-completed").click()
            expect(rows).to_have_count(2)
            for row in rows.all():
                expect(row).to_have_attribute("data-status", "completed")
            page.locator("[data-testid=exchange-row]", has_text="first-request").click()
            page.get_by_test_id("detail-decision").wait_for()
            assert "Please press sw1" in page.get_by_test_id("detail-instruction").inner_text()
            decision = page.get_by_test_id("detail-decision").inner_text()
            assert "press_button" in decision and "sw1" in decision and "panda" in decision
            assert "Press a button." in page.get_by_test_id("detail-prompt").first.inner_text()
            assert '"name": "press_button"' in page.get_by_test_id("detail-raw").first.inner_text()
            diff = page.get_by_test_id("detail-memory-diff").inner_text()
            assert "history" in diff and "added" in diff and "Please press sw1" in diff
            assert "press_button(id)" in page.get_by_test_id("detail-tools").inner_text()

            page.get_by_test_id("filter-all").click()
            expect(rows).to_have_count(3)
            screenshot = tmp_path / "ui.png"
            page.screenshot(path=str(screenshot))
            assert problems == []
        finally:
            browser.close()
    width, height = png_size(screenshot)
    assert (width, height) == (1440, 900)
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one
    print(f"screenshot: {screenshot}")
