"""Federated-learning audits: who in a federation can infer whose training data, round by round.

After Gao 2024 (University of Zurich) (a privacy audit component for decentralised federated
learning): every node's model is attacked, after every round, on every node's
training data against held-out non-members, and the result is a matrix
``[round][attacker][victim]`` per attack and metric, compared across
topologies. Modules, in the order of the flow:

* :mod:`~privgate.audits.federated.topology` — graphs (networkx) and FedAvg mixing matrices;
* :mod:`~privgate.audits.federated.split` — iid / Dirichlet node shards, matched non-members;
* :mod:`~privgate.audits.federated.simulate` — N nodes × R rounds, stacked on the vectorised engine;
* :mod:`~privgate.audits.federated.manifest` — a real federation's checkpoints (``federation.yaml``);
* :mod:`~privgate.audits.federated.attacks` / :mod:`~privgate.audits.federated.reference_attacks` — scores and pair
  metrics;
* :mod:`~privgate.audits.federated.evaluate` / :mod:`~privgate.audits.federated.run` — the audits end to end;
* :mod:`~privgate.audits.federated.decide` — a policy's federated checks (pass / fail / inconclusive);
* :mod:`~privgate.report.jobs.federation` / :mod:`~privgate.report.jobs.federation_html` — JSON and HTML;
* :mod:`~privgate.audits.federated.flower` — a Flower strategy that saves every round in the manifest layout.
"""
