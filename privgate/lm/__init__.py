"""Language models: only what is specific to them; the door, the gate, the ε search and the DP runner are shared.

A Hugging Face folder is read at the door (:mod:`privgate.inputs.targets.hf`,
text records :mod:`privgate.inputs.text`) into a target of kind ``causal_lm``
or ``sequence_classifier``. For a causal language model,
:mod:`privgate.lm.scoring` scores every record token by token in one batched
pass, the gate's causal-LM kind (:mod:`privgate.lm.audit`) shares those numbers
with :mod:`privgate.lm.attacks`, which turn them into membership scores, and
runs the distribution-shift guard (:mod:`privgate.lm.shift`) as its diagnostic;
a sequence classifier is audited by the black-box family
(:mod:`privgate.lm.classifier`). The leaks of a language model of their own —
canary exposure (:mod:`privgate.lm.canary_exposure`, candidates scored by
:mod:`privgate.lm.continuations`) and verbatim extraction
(:mod:`privgate.lm.extraction`) — are measurements the gate runs as attacks.
Hardening is DP fine-tuning from the public base (:mod:`privgate.lm.finetune`,
:mod:`privgate.lm.harden`) through the one ε search (:mod:`privgate.dp.remediate`).
Importing this package imports neither torch nor transformers.
"""
