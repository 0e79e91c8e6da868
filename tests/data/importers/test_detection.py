from pathlib import Path

import pytest

from sweworld.data.importers import detect_format, get_importer
from tests.data.importers.test_sweworld_sessions import _write_output

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("swe_agent/run", "swe-agent"),
        ("swe_agent/run/pallets__flask-4045/pallets__flask-4045.traj", "swe-agent"),
        ("r2e/fixture.jsonl", "r2e-gym"),
        ("r2e/rllm_traj.json", "r2e-gym"),
        ("r2e", "r2e-gym"),
        ("swebench/eval", "swebench"),
        ("swebench/eval/preds.json", "swebench"),
        ("swebench/summary", "swebench"),
        ("swebench/summary/org__model-x.run1.json", "swebench"),
        (
            "swebench/eval/logs/run_evaluation/run1/org__model-x/psf__requests-2317/report.json",
            "swebench",
        ),
    ],
)
def test_each_fixture_is_its_own_format(path, name):
    assert detect_format(FIXTURES / path) == name


def test_sweworld_outputs_are_detected(tmp_path):
    out = tmp_path / "out"
    _write_output(out)
    for path in (out, out / "records", out / "trajectories.jsonl", out / "records" / "swt.jsonl"):
        assert detect_format(path) == "sweworld", path


def test_no_false_claims(tmp_path):
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="unknown format"):
        detect_format(tmp_path / "notes.json")
    for name in ("swe-agent", "r2e-gym", "swebench", "sweworld"):
        assert not get_importer(name).detect(tmp_path / "missing")
