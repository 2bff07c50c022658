"""Every file a ``check``, ``harden`` or ``fl`` run reads, found as its loaders will find them, named for messages.

The output guards (:func:`privgate.io.guards.check_outputs`) refuse an output
that would land on one of these. Listing them needs to know how each input is
named on the command line — a built-in policy name or a policy file, a data
file or a ``module:function`` factory, a recipe entry point or a language
model's recipe file — which is the command's knowledge, not the guards'.
"""

from __future__ import annotations

from pathlib import Path

from privgate.io.guards import Named, is_factory, spec_file


def audit_inputs(
    *,
    model: str | None,
    policy: str | None,
    data: dict[str, str | None],
    recipe: str | None,
    config: Path | None,
    base: Path,
) -> list[Named]:
    """Every file an audit reads, as the loaders will find them.

    Args:
        model: the checkpoint path.
        policy: a built-in policy name or a policy file.
        data: ``{"members": spec, ...}``: files (relative to the working
            directory or to ``base``, as :func:`privgate.inputs.data.load_dataset`
            resolves them) or ``module:function`` factories.
        recipe: ``module:attr``, or a language model's recipe file (``.yaml``).
        config: the config file in use, if any.
        base: the config's folder (the working directory without one); module
            specs are searched there first, then in the working directory.
    """
    from privgate.policy import builtin_policies

    dirs = [base, Path.cwd()]
    found: list[Named | None] = []
    if model and not model.strip().lower().startswith(("http://", "https://")):  # an endpoint is no file
        found.append(Named(Path(model), "the model"))
    if policy:
        builtin = builtin_policies().get(policy) if not Path(policy).suffix else None
        found.append(Named(builtin or Path(policy), "the policy"))
    for role, spec in data.items():
        if not spec:
            continue
        p = Path(spec)
        candidates = [p] if p.is_absolute() else [p, base / p]
        if is_factory(spec, base):
            found.append(spec_file(spec, f"the {role} data factory", dirs))
        else:
            found += [Named(c, f"the {role} data") for c in candidates]
    if recipe and Path(recipe).suffix in (".yaml", ".yml"):  # a language-model recipe file (privgate.inputs.lm_recipe)
        found.append(Named(Path(recipe), "the recipe"))
    elif recipe:
        found.append(spec_file(recipe, "the recipe", dirs))
    if config:
        found.append(Named(Path(config), "the config file"))
    return [n for n in found if n is not None]


__all__ = ["audit_inputs"]
