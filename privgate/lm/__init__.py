"""Language models: Hugging Face causal LMs and text classifiers as targets of ``privgate check``.

:mod:`privgate.inputs.targets.hf` reads a ``save_pretrained`` directory (or a PEFT
adapter on its base), :mod:`privgate.inputs.text` the records of text,
:mod:`privgate.lm.scoring` scores them token by token in one batched pass,
:mod:`privgate.lm.attacks` turns those numbers into membership scores and
the gate decides a policy on them (:mod:`privgate.lm.audit` is the causal language-model kind). The leaks of a language
model of their own — canary exposure (:mod:`privgate.lm.exposure`, canaries in
:mod:`privgate.inputs.canaries`, candidates scored by
:mod:`privgate.lm.continuations`), verbatim extraction
(:mod:`privgate.lm.extraction`) — and the distribution-shift guard
(:mod:`privgate.lm.shift`) are pure functions the gate calls. Importing this
package imports neither torch nor transformers.
"""
