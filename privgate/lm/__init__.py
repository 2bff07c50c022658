"""Language models: Hugging Face causal LMs and text classifiers as targets of ``privgate check``.

:mod:`privgate.lm.loading` reads a ``save_pretrained`` directory (or a PEFT
adapter on its base), :mod:`privgate.lm.text` the records of text,
:mod:`privgate.lm.scoring` scores them token by token in one batched pass,
:mod:`privgate.lm.attacks` turns those numbers into membership scores and
:mod:`privgate.lm.gate` decides a policy on them. The leaks of a language
model of their own — canary exposure (:mod:`privgate.lm.canary_exposure`, canaries in
:mod:`privgate.lm.canaries`, candidates scored by
:mod:`privgate.lm.continuations`), verbatim extraction
(:mod:`privgate.lm.extraction`) — and the distribution-shift guard
(:mod:`privgate.lm.shift`) are pure functions the gate calls. Importing this
package imports neither torch nor transformers.
"""
