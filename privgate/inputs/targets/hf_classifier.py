"""A Hugging Face sequence classifier as a black-box estimator over records of text.

The classifier (``…ForSequenceClassification``) is wrapped as an estimator
whose rows are text records (an object array of shape ``[n, 1]``): its
``predict_proba`` is the softmax of the model's logits, so a
:class:`~privgate.inputs.target.Target` over it is audited by the black-box
family like any other classifier. The attacks of one audit ask for the same records' outputs several times
(the members and non-members together, seven times for ``internal``): the last few answers are kept and handed
out again, so each set of records runs through the model once per device it is on.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from privgate.inputs.targets.hf import LoadedLM


class TextClassifier:
    """``predict_proba`` / ``predict_log_proba`` of a sequence classifier on ``[n, 1]`` object arrays of text.

    The records are tokenised onto the device the model is on at the call (:func:`privgate.device.device_of`).
    """

    #: How many answers (one per set of records asked for) are kept.
    KEPT = 4

    def __init__(self, lm: LoadedLM, batch_size: int = 32) -> None:
        self.lm, self.batch_size = lm, batch_size
        self.classes_ = np.arange(int(lm.model.config.num_labels))
        self._kept: OrderedDict[tuple[str, tuple[str, ...]], np.ndarray] = OrderedDict()

    def predict_log_proba(self, x: np.ndarray) -> np.ndarray:
        """Log-softmax of the logits of each record, in batches; an answer for the same records and device is kept."""
        from privgate.device import device_of

        device = device_of(self.lm.model)
        texts = tuple(str(t) for t in np.asarray(x, dtype=object).reshape(len(x), -1)[:, 0])
        key = (str(device), texts)
        if key not in self._kept:
            self._kept[key] = self._log_proba(texts, device)
            while len(self._kept) > self.KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return self._kept[key].copy()

    def _log_proba(self, texts: tuple[str, ...], device: object) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = self.lm.tokenizer(
                    list(texts[i : i + self.batch_size]),
                    return_tensors="pt",
                    padding=True,
                    truncation=True,
                    max_length=self.lm.context,
                ).to(device)
                logits = self.lm.model(**enc).logits.double()
                out.append(torch.log_softmax(logits, -1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.classes_)))

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.predict_log_proba(x))


__all__ = ["TextClassifier"]
