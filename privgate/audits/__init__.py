"""Audits of privacy *claims* and of federations, beyond a single model.

Room for the mechanism audits (an LDP randomiser or a DP-SGD trainer that
claims ε: does it deliver it?) and the federated-learning audits (who in a
federation can infer whose data). They report through the same semantics as
the model gate: intervals, pass / fail / inconclusive, exit codes.
"""
