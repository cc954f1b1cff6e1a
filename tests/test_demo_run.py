"""The one-command demo, shortened (--quick: one epoch of a tiny model), end to end on the bundled corpus."""

import json

import numpy as np
import pytest


@pytest.mark.xdist_group("quick_demo")  # one worker builds the session's quick demo
def test_quick_demo_prints_the_comparison_and_writes_the_det_figure(quick_demo):
    out, run = quick_demo
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    table = [line for line in run.stdout.splitlines() if line.startswith("| MCADAMS")]
    # One epoch each: both attackers carry the "best epoch is the last" flag, marked † (issue 31).
    assert [line.split("|")[2].strip() for line in table] == ["Baseline †", "SegReConcat †"]
    # Each run's epoch line (losses, error rate, speed, time left) reaches the console.
    assert "MCADAMS/baseline train: epoch 1/1: train loss " in run.stdout
    assert "MCADAMS/rr_concat train: epoch 1/1: train loss " in run.stdout
    for config, mode in (("baseline", "none"), ("rr_concat", "concat")):
        results = json.loads((out / "MCADAMS" / config / "eval" / "results.json").read_text())
        eers = [results["table"][key] for key in ("dev_f", "dev_m", "test_f", "test_m", "avg")]
        assert all(np.isfinite(eers)) and all(0 <= e <= 100 for e in eers)
        assert results["subsets"]["dev_f"]["target_trials"] == 20
        assert results["subsets"]["dev_f"]["nontarget_trials"] == 80
        # Every privacy metric beyond the EER shows, with its interval: 20 target trials give linkability
        # its two histogram bins, and top-2 among 5 speakers is not 100 % by construction.
        for dev_f in (results["subsets"][name] for name in ("dev_f", "dev_m", "test_f", "test_m")):
            assert (
                0 <= dev_f["min_cllr"] <= 1
                and dev_f["zebra_tag"] in "0ABCDEF"
                and 0 <= dev_f["singling_out"] <= 1
            )
            assert 0 <= dev_f["linkability"] <= 1 and len(dev_f["linkability_local"]["D"]) == 2
            assert dev_f["top2"] is not None and "top2" not in dev_f["undefined_because"]
            assert len(dev_f["per_speaker_eer"]) == 5 and "min_cllr_ci" in dev_f and "linkability_ci" in dev_f
        assert (out / "MCADAMS" / config / "eval" / "privacy.png").stat().st_size > 10_000
        logged = (out / "MCADAMS" / config / "grid_train.log").read_text()
        assert f"--mode={mode}" in logged
    # SegReConcat really ran: the training log counts augmented utterances every epoch.
    assert "augmented=" in (out / "MCADAMS" / "rr_concat" / "grid_train.log").read_text()
    assert (out / "det_MCADAMS.png").stat().st_size > 10_000
    table2 = (out / "table2_comparison.md").read_text()
    assert (
        "minCllr (bits) avg [95 % CI]" in table2 and "no value for MCADAMS baseline linkability" not in table2
    )
    linkability = [line.split("|")[13].strip() for line in table if line.startswith("| MCADAMS")]
    assert all(cell != "-" and "[" in cell for cell in linkability), linkability  # Table 2 shows it
    assert (out / "privacy_MCADAMS.png").stat().st_size > 10_000
    assert "privacy beyond the EER: " in run.stdout
    # The verdict names the convergence flags that apply: one epoch, so the best epoch is the last (issue 31).
    for label in ("Baseline", "SegReConcat"):
        (line,) = [line for line in run.stdout.splitlines() if line.startswith(f"{label}'s attacker: ")]
        assert "best epoch is the last" in line and line.endswith("(docs/evaluation.md#convergence-flags)")
    assert "† MCADAMS Baseline: best epoch is the last" in (out / "table2_comparison.md").read_text()
