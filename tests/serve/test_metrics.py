"""The world service's Prometheus metrics: counts, bounded labels, the exposition format."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from sweworld.serve.world.metrics import (
    MAX_LABEL_VALUES,
    UNMATCHED_ROUTE,
    Metrics,
    install,
)


def value(metrics: Metrics, name: str, **labels: str) -> float:
    got = metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def families(metrics: Metrics) -> dict:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_episode_and_step_counts():
    m = Metrics()
    for _ in range(3):
        m.episode_opened()
    m.episode_closed()
    m.step_done(0.004, None)
    m.step_done(0.2, None)
    m.step_done(1.5, "busy")
    m.model_calls(3)
    m.model_calls(0)
    m.cache_hit()
    assert value(m, "sweworld_episodes_live") == 2
    assert value(m, "sweworld_episodes_opened_total") == 3
    assert value(m, "sweworld_episodes_closed_total") == 1
    assert value(m, "sweworld_steps_total", outcome="ok") == 2
    assert value(m, "sweworld_steps_total", outcome="busy") == 1
    assert value(m, "sweworld_step_latency_seconds_count") == 3
    assert value(m, "sweworld_step_latency_seconds_bucket", le="0.005") == 1
    assert value(m, "sweworld_step_latency_seconds_bucket", le="2.5") == 3
    assert value(m, "sweworld_step_latency_seconds_sum") == pytest.approx(1.704)
    assert value(m, "sweworld_model_calls_total") == 3
    assert value(m, "sweworld_cache_hits_total") == 1


def test_observe_step_info_counts_who_answered():
    m = Metrics()
    model_call = {"info": {"source": "model", "attempts": [{"seed": 0}, {"seed": 1}]}}
    cached = {"info": {"source": "model", "cache_hit": True, "attempts": [{"seed": 0}]}}
    fallback = {
        "info": {"source": "fallback", "fallback": True, "attempts": [{"error": "LMError: down"}]}
    }
    info = {
        "execution_calls": [
            {"info": {"executed": True, "executor": "local"}},
            model_call,
            cached,
            fallback,
            {"info": {"source": "exact"}},
            {"info": {"source": "made-up"}},
            "not a call",
            {"info": None},
        ],
        "reason": "submitted",
    }
    m.observe_step_info(info)
    m.observe_step_info({"action_error": "parse"})
    m.observe_step_info({"execution_calls": "garbage"})
    m.observe_step_info("not a mapping")  # type: ignore[arg-type]
    assert value(m, "sweworld_real_runs_total") == 1
    assert value(m, "sweworld_cache_hits_total") == 1
    assert value(m, "sweworld_model_calls_total") == 3  # the cached call made none
    assert value(m, "sweworld_model_errors_total") == 1
    assert value(m, "sweworld_fallbacks_total") == 1
    for source, count in [("real", 1), ("model", 1), ("cache", 1), ("fallback", 1), ("exact", 1)]:
        assert value(m, "sweworld_execution_calls_total", source=source) == count
    assert value(m, "sweworld_execution_calls_total", source="other") == 1
    assert value(m, "sweworld_episodes_ended_total", reason="submitted") == 1
    assert value(m, "sweworld_action_errors_total", kind="parse") == 1


def test_free_form_labels_stay_bounded():
    m = Metrics()
    for i in range(1000):
        m.step_done(0.01, f"kind_{i}")
        m.http_error(400 + i % 5, f"code_{i}")
        m.episode_ended(f"reason {i}")  # not a well-formed label value: other
    m.http_error(999, None)
    fams = families(m)
    outcomes = {s.labels["outcome"] for s in fams["sweworld_steps"].samples}
    assert len(outcomes) == MAX_LABEL_VALUES + 1 and "other" in outcomes
    assert sum(s.value for s in fams["sweworld_steps"].samples) == 1000
    errors = fams["sweworld_http_errors"].samples
    assert len({s.labels["error"] for s in errors}) <= MAX_LABEL_VALUES + 1
    assert {s.labels["status"] for s in errors} == {"400", "401", "402", "403", "404", "other"}
    reasons = {s.labels["reason"] for s in fams["sweworld_episodes_ended"].samples}
    assert reasons == {"other"}


def test_two_services_in_one_process_do_not_share_counts():
    a, b = Metrics(), Metrics()
    a.episode_opened()
    assert value(a, "sweworld_episodes_live") == 1
    assert value(b, "sweworld_episodes_live") == 0


def _tiny_app(metrics: Metrics):
    fastapi = pytest.importorskip("fastapi")
    app = fastapi.FastAPI()

    @app.get("/v1/episodes/{episode_id}")
    def get_episode(episode_id: str):
        if episode_id.startswith("missing"):
            metrics.http_error(404, "unknown_episode")
            raise fastapi.HTTPException(404, "unknown episode")
        return {"episode_id": episode_id}

    @app.post("/v1/episodes/{episode_id}/step")
    def step(episode_id: str, body: dict):
        metrics.step_done(0.001, None)
        return {"observation": "ok"}

    @app.get("/boom")
    def boom():
        raise RuntimeError("a bug")

    install(app, metrics, path="/metrics")
    return app


def test_requests_are_counted_by_route_template_with_bounded_cardinality():
    from fastapi.testclient import TestClient

    m = Metrics()
    app = _tiny_app(m)
    with TestClient(app, raise_server_exceptions=False) as client:
        for i in range(1000):
            assert client.get(f"/v1/episodes/ep-{i}").status_code == 200
        for i in range(20):
            assert client.get(f"/v1/episodes/missing-{i}").status_code == 404
            assert client.post(f"/v1/episodes/e{i}/step", json={"action": "ls"}).status_code == 200
            assert client.get(f"/random/{i}/probe?token=x").status_code == 404
        assert client.delete("/v1/episodes/e1/step").status_code == 405
        assert client.get("/boom").status_code == 500
        body = client.get("/metrics")
    assert body.status_code == 200
    fams = {f.name: f for f in text_string_to_metric_families(body.text)}
    samples = fams["sweworld_http_requests"].samples
    routes = {s.labels["route"] for s in samples}
    assert routes == {
        "/v1/episodes/{episode_id}",
        "/v1/episodes/{episode_id}/step",
        "/boom",
        UNMATCHED_ROUTE,
    }  # the scrape itself is counted after it answered
    assert len(samples) < 20  # 1,040 distinct ids, a handful of series
    count = {(s.labels["method"], s.labels["route"], s.labels["status"]): s.value for s in samples}
    assert count[("GET", "/v1/episodes/{episode_id}", "200")] == 1000
    assert count[("GET", "/v1/episodes/{episode_id}", "404")] == 20
    assert count[("POST", "/v1/episodes/{episode_id}/step", "200")] == 20
    assert count[("GET", UNMATCHED_ROUTE, "404")] == 20
    assert count[("DELETE", "/v1/episodes/{episode_id}/step", "405")] == 1
    assert count[("GET", "/boom", "500")] == 1
    assert not any("ep-" in s.labels["route"] for s in samples)
    assert value(m, "sweworld_http_errors_total", status="404", error="unknown_episode") == 20
    assert value(m, "sweworld_steps_total", outcome="ok") == 20
    assert value(m, "sweworld_http_requests_in_flight") == 0
    latency = value(
        m, "sweworld_http_request_duration_seconds_count", method="GET",
        route="/v1/episodes/{episode_id}",
    )  # fmt: skip
    assert latency == 1020
    scrapes = value(m, "sweworld_http_requests_total", method="GET", route="/metrics", status="200")
    assert scrapes == 1


def test_real_episode_steps_feed_the_counters(manager, toy_task):
    """A local episode's real runs and a simulated one's model calls and cache hit, from the
    steps' own info."""
    from sweworld.env import Episode
    from sweworld.models.replay import ReplayLM
    from sweworld.transition.simulated import SimulatedExecutor

    m = Metrics()
    python = "python -c 'print(1 + 1)'"
    with Episode(toy_task, manager=manager, executor="local", reward="none") as ep:
        ep.reset()
        m.episode_opened()
        m.observe_step_info(ep.step(python).info)
        m.observe_step_info(ep.step("<function=finish>\n</function>").info)
    m.episode_closed()
    assert value(m, "sweworld_real_runs_total") == 1
    assert value(m, "sweworld_episodes_ended_total", reason="submitted") == 1

    answer = json.dumps({"stdout": "2\n", "stderr": "", "exit_code": 0})
    lm = ReplayLM(lambda messages: answer)
    executor = SimulatedExecutor(lm, mode="blind", step_timeout=30)
    with Episode(toy_task, manager=manager, executor=executor, reward="none") as ep:
        ep.reset()
        first = ep.step(python).info
        second = ep.step(python).info  # same command, same files: the cache answers
        m.observe_step_info(first)
        m.observe_step_info(second)
    assert value(m, "sweworld_model_calls_total") == len(lm.calls) >= 1
    assert value(m, "sweworld_cache_hits_total") == 1
    assert value(m, "sweworld_execution_calls_total", source="model") == 1
    assert value(m, "sweworld_episodes_live") == 0
