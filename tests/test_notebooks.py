"""Both analysis notebooks run top to bottom (nbclient, a real kernel) on the run
directory of a short training run, and produce their figures; given a study's directory
(the same short run laid out as three arms), they also set its arms beside the paper."""

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = {
    "loss_behaviour": ["loss_weight_ratio_paper.png", "loss_clip_vs_staleness.png", "loss_clip_runs.png"],
    "memory_drift": ["memory_drift.png", "memory_keys_per_update.png"],
}
STUDY_FIGURE = {"loss_behaviour": "loss_behaviour_study.png", "memory_drift": "memory_drift_study.png"}


def outputs(notebook) -> str:
    return "\n".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)


def images(notebook) -> int:
    return sum("image/png" in o.get("data", {}) for cell in notebook.cells if cell.cell_type == "code"
               for o in cell.outputs)


def execute(name, figures, monkeypatch):
    monkeypatch.setenv("ASYNCWEBRL_FIGURES", str(figures))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(os.path.join(ROOT, "notebooks", f"{name}.ipynb"), as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}}).execute()
    return notebook


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_runs_on_a_training_run_and_draws_its_figures(name, short_run, tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCWEBRL_RUNS", short_run)
    monkeypatch.delenv("ASYNCWEBRL_STUDY", raising=False)
    notebook = execute(name, tmp_path, monkeypatch)
    for figure in FIGURES[name]:
        assert os.path.getsize(tmp_path / figure) > 1000, figure
    assert images(notebook) == len(FIGURES[name])
    assert not os.path.exists(tmp_path / STUDY_FIGURE[name])
    text = outputs(notebook)
    assert "no study given (ASYNCWEBRL_STUDY=OUT)" in text
    if name == "loss_behaviour":
        assert "0.125" in text and "clip ratio coupled" in text and "trained episodes" in text
        # at the paper's statistics 1/|tau| shrinks the failed steps' share by 5.1 / 12.5
        ratio_lines = [line.split() for line in text.splitlines() if line.strip().startswith("0.500")]
        traj, const = float(ratio_lines[0][1]), float(ratio_lines[0][2])
        assert traj / const == pytest.approx(5.1 / 12.5, rel=1e-3)
    else:
        assert "memory keys that are generic placeholders" in text and "episodes, " in text


def study_of(run: str, out) -> str:
    """The short run as a study's three arms (OUT/<arm>/seed0): `const` as it ran, `traj` and
    `coupled` the same files under a config.json that says loss.normalizer=traj or
    loss.decoupled=False. One run's numbers under three arms' settings: enough to lay the
    comparison out (no report.json: the notebook builds it), not to measure one."""
    config = json.load(open(os.path.join(run, "config.json")))
    assert config["loss"]["normalizer"] == "const" and config["loss"]["decoupled"] is True
    for arm, loss in (("const", {}), ("traj", {"normalizer": "traj"}), ("coupled", {"decoupled": False})):
        directory = out / arm / "seed0"
        directory.mkdir(parents=True)
        for name in os.listdir(run):
            if name != "config.json":
                os.symlink(os.path.join(run, name), directory / name)
        json.dump({**config, "loss": {**config["loss"], **loss}}, open(directory / "config.json", "w"))
    return str(out)


def show(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def arm_line(text: str, arm: str, setting: str) -> list[str]:
    """The words of the one printed line that starts with the arm's name and has its setting."""
    lines = [line for line in text.splitlines() if line.startswith(f"{arm} ") and setting in line]
    assert len(lines) == 1, (arm, setting, lines)
    return lines[0].split()


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_sets_a_studys_arms_beside_the_papers_numbers(name, short_run, tmp_path, monkeypatch):
    out = study_of(short_run, tmp_path / "study")
    monkeypatch.setenv("ASYNCWEBRL_STUDY", out)
    monkeypatch.delenv("ASYNCWEBRL_RUNS", raising=False)   # the runs analysed are then the study's
    notebook = execute(name, tmp_path, monkeypatch)
    assert os.path.getsize(tmp_path / STUDY_FIGURE[name]) > 1000
    assert images(notebook) == len(FIGURES[name]) + 1
    report = json.load(open(os.path.join(out, "report.json")))   # built from the runs' config.json
    arms = {arm["arm"]: arm for arm in report["arms"]}
    assert sorted(arms) == ["const", "coupled", "traj"]
    text = outputs(notebook)
    limits = "/".join(map(str, arms["const"]["settings"]["agent.train_step_limits"]))
    if name == "memory_drift":
        assert all(f"{arm}/seed0" in text for arm in arms)   # the run-level table, one column per study run
        assert arm_line(text, "paper", "1/|tau|")[-5:] == ["34%", "7%", "36%", "~240", "—"]
        assert arm_line(text, "paper", "1/k ")[-5:] == ["11%", "65%", "76%", "-33%", "—"]
        for arm, normaliser in (("const", "1/k"), ("coupled", "1/k"), ("traj", "1/|tau|")):
            dynamics = arms[arm]["dynamics"]
            # a measure the run has no data for (this tiny model writes no readable Memory) is "—"
            expected = [show(dynamics[key], ".1%") for key in (
                "memory_generic_key_share", "memory_key_persistence", "memory_adjacent_unchanged")]
            expected += [show(dynamics["response_tokens_per_step"], ".1f"), show(dynamics["memory_keys_per_step"], ".1f")]
            assert arm_line(text, arm, f"{normaliser}, {limits}")[-5:] == expected
        assert dynamics["memory_generic_key_share"] is None and expected[0] == "—"
        return
    eta = arms["const"]["settings"]["rl.eta"]
    for arm, setting in (("const", "const, decoupled"), ("coupled", "const, coupled"), ("traj", "traj, decoupled")):
        a = arms[arm]
        expected = [show(a["dynamics"][key], spec) for key, spec in (
            ("clip_ratio", ".4f"), ("behave_cap_ratio", ".1e"), ("staleness_mean", ".2f"), ("steps_per_success", ".2f"),
            ("steps_per_failure", ".2f"), ("response_tokens_per_step", ".1f"))]
        assert arm_line(text, arm, f"grpo, {setting}, eta {eta}")[-7:] == expected + [
            show(a["wall_seconds_per_update"], ".1f")]
    # the pairs: one run under both names, so the changes are none, and a ratio to a rate of 0 is undefined
    coupled, decoupled = arms["coupled"]["dynamics"]["clip_ratio"], arms["const"]["dynamics"]["clip_ratio"]
    halving = "—" if not coupled else f"{decoupled / coupled:.2f}"
    assert (f"coupled (coupled) -> const (decoupled): clipped tokens {show(coupled, '.4f')} -> "
            f"{show(decoupled, '.4f')}, decoupled / coupled {halving} (paper ~0.5: roughly halves)") in text
    assert "traj (1/|tau|) -> const (1/k): steps per failure" in text and "speedup 1.00x (paper 1.8x)" in text
    # success before and after: no evaluation in this run, so "—" (not 0%), beside the paper's 26.2% -> 45.4%
    assert arms["const"]["before"]["episodes"] == 0 and arms["const"]["per_seed"][0]["success_before"] is None
    for arm in arms:
        assert arm_line(text, arm, "held-out")[1:] == ["held-out", "—", "—", "26.2%", "->", "45.4%", "(AsyncWebRL)"]
