"""Gating where the model is trained: the Lightning and Hugging Face Trainer callbacks (the real libraries).

A tiny MLP trained for one epoch to memorise 200 rows with noisy labels (40 full batches), in a Lightning ``fit``
and in a ``Trainer.train``:

* ``on_fail="raise"``: the run fails with :class:`PrivacyGateFailed`, whose message is the verdict line; the
  report written is the one ``api.check`` gives for the trained module (same checks, values and CIs);
* ``on_fail="log"``: the run ends, the verdict line is logged as a warning, the report is written;
* a report path whose suffix names no format, or another ``on_fail``, is one sentence before training.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from cases import AUC_POLICY, make_model, synthetic

from privgate import PrivgateError, api
from privgate.integrations.gate import GateSpec, Logits, PrivacyGateFailed

STEPS = 40  # one epoch of 40 full batches (the 200 rows repeated): the MLP memorises the 80 % random labels


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("integrations")
    (d / "policy.yaml").write_text(AUC_POLICY)
    return d, synthetic(200, seed=1, label_noise=0.8), synthetic(200, seed=2, label_noise=0.8)


def _same_report_as_check(report_file, module, rows) -> dict:  # noqa: ANN001
    d, members, nonmembers = rows
    written = json.loads(report_file.read_text())
    direct = api.check(Logits(module), str(d / "policy.yaml"), members, nonmembers, cache_dir="off")
    assert written["verdict"] == direct.verdict
    for a, b in zip(written["checks"], direct.model_dump(mode="json")["checks"], strict=True):
        assert a["value"] == pytest.approx(b["value"], abs=1e-9) and a["ci"] == pytest.approx(b["ci"], abs=1e-9)
    return written


def test_lightning_fit_fails_on_a_memorising_model_and_only_logs_when_asked(rows, tmp_path, caplog):
    lightning = pytest.importorskip("lightning")
    from privgate.integrations.lightning import PrivacyGate

    d, (xm, ym), nonmembers = rows

    class Tiny(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, _):  # noqa: ANN001, ANN202
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):  # noqa: ANN202
            return torch.optim.Adam(self.parameters(), 3e-2)

    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(xm).repeat(STEPS, 1), torch.from_numpy(ym).repeat(STEPS)),
        batch_size=200,
    )

    def fit(gate: PrivacyGate) -> Tiny:
        torch.manual_seed(0)
        model = Tiny()
        trainer = lightning.Trainer(
            max_epochs=1, callbacks=[gate], logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
        )  # fmt: skip
        trainer.fit(model, loader)
        return model

    gate = PrivacyGate(str(d / "policy.yaml"), (xm, ym), nonmembers, report=tmp_path / "r.json", cache_dir="off")
    with pytest.raises(PrivacyGateFailed) as err:
        fit(gate)
    assert str(err.value) == gate.report.summary and "fail" in str(err.value).lower()
    assert err.value.report.verdict == "fail"
    logging_gate = PrivacyGate(
        str(d / "policy.yaml"), (xm, ym), nonmembers, report=tmp_path / "log.json", on_fail="log", cache_dir="off"
    )
    with caplog.at_level(logging.WARNING, logger="privgate"):
        model = fit(logging_gate)
    assert any(logging_gate.report.summary in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    written = _same_report_as_check(tmp_path / "log.json", model, rows)
    assert written["verdict"] == "fail" and written["checks"][0]["value"] > 0.6
    assert json.loads((tmp_path / "r.json").read_text())["checks"] == written["checks"]


def test_hf_trainer_fails_on_a_memorising_model_and_only_logs_when_asked(rows, tmp_path, caplog):
    transformers = pytest.importorskip("transformers")
    from privgate.integrations.hf_trainer import PrivacyGateCallback

    d, (xm, ym), nonmembers = rows

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_model()

        def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
            logits = self.net(x)
            loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits} if loss is not None else {"logits": logits}

    train_set = [{"x": torch.from_numpy(x), "labels": int(y)} for x, y in zip(xm, ym, strict=True)] * STEPS

    def train(callback: PrivacyGateCallback) -> Tiny:
        torch.manual_seed(0)
        model = Tiny()
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "hf"), num_train_epochs=1, per_device_train_batch_size=200,
            learning_rate=3e-2, lr_scheduler_type="constant", report_to=[], save_strategy="no",
            logging_strategy="no", disable_tqdm=True, use_cpu=True, dataloader_num_workers=0, seed=0,
        )  # fmt: skip
        trainer = transformers.Trainer(model=model, args=args, train_dataset=train_set, callbacks=[callback])
        trainer.train()
        return model

    gate = PrivacyGateCallback(str(d / "policy.yaml"), (xm, ym), nonmembers, report=tmp_path / "r.md", cache_dir="off")
    with pytest.raises(PrivacyGateFailed) as err:
        train(gate)
    assert str(err.value) == gate.report.summary and err.value.report.verdict == "fail"
    assert (tmp_path / "r.md").read_text().startswith("## privgate ❌ FAIL · policy `thresholds`")
    logging_gate = PrivacyGateCallback(
        str(d / "policy.yaml"), (xm, ym), nonmembers, report=tmp_path / "log.json", on_fail="log", cache_dir="off"
    )
    with caplog.at_level(logging.WARNING, logger="privgate"):
        model = train(logging_gate)
    assert any(logging_gate.report.summary in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    written = _same_report_as_check(tmp_path / "log.json", model, rows)
    assert written["verdict"] == "fail" and written["checks"][0]["value"] > 0.6


def test_a_report_path_without_a_format_or_another_on_fail_is_one_sentence():
    x = np.zeros((2, 20), np.float32), np.zeros(2, np.int64)
    with pytest.raises(PrivgateError, match=r"^report\.txt: the report's suffix names no format; use one of \.json"):
        GateSpec("internal", x, x, report="report.txt")
    with pytest.raises(PrivgateError, match=r"^on_fail: 'ignore' is not one of raise, log\.$"):
        GateSpec("internal", x, x, on_fail="ignore")
