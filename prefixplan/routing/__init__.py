"""Replica routing shared by ``prefixplan gateway`` and ``simulate --replicas``: what a request is
for routing (:mod:`~prefixplan.routing.content`: chained hashes of its content in fixed units) and
the policies that pick a replica (:mod:`~prefixplan.routing.policies`). Below both the trace (which
records each request's units) and the gateway, so the simulation predicts what the gateway does.
"""
