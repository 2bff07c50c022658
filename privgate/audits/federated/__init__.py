"""Federated-learning audits: who in a federation can infer whose training data, round by round.

After Gao 2024 (University of Zurich; a privacy audit component for decentralised federated learning): every
node's model is attacked, after every round, on every node's training data against held-out non-members, giving
a matrix ``[round][attacker][victim]`` per attack and metric, compared across topologies. The flow:
:mod:`~privgate.audits.federated.topology`, :mod:`~privgate.audits.federated.split`,
:mod:`~privgate.audits.federated.simulate` or :mod:`~privgate.audits.federated.manifest`, the attacks,
:mod:`~privgate.audits.federated.run`, :mod:`~privgate.audits.federated.decide`; Flower in
:mod:`~privgate.audits.federated.flower`. Each module's part: ``docs/internals-dp-audits.md``.
"""
