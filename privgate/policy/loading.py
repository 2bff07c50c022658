"""Loading policies: built-in names and YAML files, size-limited and alias-safe, with file/line/field errors.

``extends`` is resolved here: a built-in name, or a file relative to the
policy that names it; cycles are refused.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from privgate.errors import PolicyError, shown
from privgate.inputs.textfile import read_limited
from privgate.inputs.validation import FieldError, describe
from privgate.inputs.yamlsafe import load_yaml, locate
from privgate.policy.schema import Policy

POLICY_SUFFIXES = (".yaml", ".yml")


def _builtin_dir() -> Path:
    """Built-in policies: inside the wheel (``privgate/_policies``) or the source tree's ``policies/``."""
    packaged = Path(str(resources.files("privgate"))) / "_policies"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / "policies"


def builtin_policies() -> dict[str, Path]:
    """Names and files of the built-in policies."""
    d = _builtin_dir()
    return {p.stem: p for p in sorted(d.glob("*.yaml"))} if d.is_dir() else {}


def load_extended(spec: str, base: str | Path | None, chain: tuple[str, ...]) -> Policy:
    """The policy named by ``extends``: a built-in name, or a file path relative to ``base``."""
    builtins = builtin_policies()
    if spec in builtins and not Path(spec).suffix:
        key, target = f"builtin:{spec}", builtins[spec]
    else:
        p = Path(spec)
        if not p.is_absolute() and base is not None:
            p = Path(base) / p
        if not p.is_file():
            raise FieldError(
                "extends", f"{shown(spec)} is neither a built-in policy ({', '.join(builtins)}) nor a policy file"
            )
        key, target = str(p.resolve()), p
    if key in chain:
        raise FieldError("extends", f"{shown(spec)} extends this policy again (a cycle: {' → '.join(chain + (key,))})")
    text = read_limited(Path(target), "policy file", PolicyError)
    parent = parse_policy(text, str(target), base=Path(target).parent, chain=chain + (key,))
    parent._source = spec if key.startswith("builtin:") else str(target)
    return parent


def parse_policy(
    text: str, source: str = "<policy>", *, base: str | Path | None = None, chain: tuple[str, ...] = ()
) -> Policy:
    """Parse and validate policy YAML; errors name ``source``, the line and the field.

    The YAML is read with :func:`privgate.inputs.yamlsafe.load_yaml` (no alias bombs);
    validation errors become one sentence with :func:`privgate.inputs.validation.describe`.
    ``base`` is the folder an ``extends:`` file path is relative to; ``chain``
    the policies already being loaded (to refuse cycles).
    """
    data, tree = load_yaml(text, source, PolicyError)
    if not isinstance(data, dict):
        raise PolicyError(
            f"{source}: a policy must be a YAML mapping with 'name', 'sensitivity', 'release' and 'checks'."
        )
    try:
        context = {"base": base, "chain": chain or (source,), "load": load_extended}
        policy = Policy.model_validate(data, context=context)
    except ValidationError as exc:
        raise PolicyError(describe(exc, tree, source, Policy)) from None
    # where each check sits in the file privgate read, recorded now: a report's SARIF points there without
    # ever opening the path a (saved) report names
    policy._check_lines = {c.id: line for i, c in enumerate(policy.checks) if (line := locate(tree, ("checks", i))[0])}
    return policy


def load_policy(spec: str | Path) -> Policy:
    """Load a built-in policy by name (``strict``) or a policy file by path."""
    spec_str = str(spec)
    builtins = builtin_policies()
    path = Path(spec_str)
    if spec_str in builtins and not path.suffix:
        path = builtins[spec_str]
    elif not path.exists():
        if path.suffix in POLICY_SUFFIXES or "/" in spec_str or "\\" in spec_str:
            raise PolicyError(f"{spec_str}: policy file not found.")
        raise PolicyError(f"unknown policy '{spec_str}': not a built-in ({', '.join(builtins)}) and no such file.")
    if path.is_dir():
        raise PolicyError(f"{path}: is a directory, expected a policy YAML file.")
    text = read_limited(path, "policy file", PolicyError)
    key = f"builtin:{spec_str}" if spec_str in builtins and not Path(spec_str).suffix else str(path.resolve())
    policy = parse_policy(text, str(path), base=path.parent, chain=(key,))
    policy._source = spec_str if spec_str in builtins and not Path(spec_str).suffix else str(path)
    return policy


def as_policy(policy: Policy | str | Path) -> Policy:
    """A :class:`Policy` from a Policy, a built-in name or a policy file (:func:`load_policy`)."""
    return policy if isinstance(policy, Policy) else load_policy(policy)


def policy_json_schema() -> str:
    """JSON Schema of the policy format, for editors (yaml-language-server)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "privgate policy"
    return json.dumps(schema, indent=2)


__all__ = [
    "POLICY_SUFFIXES",
    "as_policy",
    "builtin_policies",
    "load_extended",
    "load_policy",
    "parse_policy",
    "policy_json_schema",
]
