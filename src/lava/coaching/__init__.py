"""Coaching and dataset export for MAGMA-GEN (protocol.md §10 and §11).

- `models`: the coaching wire models, field for field as magma_core 2.0.1 defines them;
- `sessions`: the one server state the protocol allows, coaching configuration per GEN run;
- `service`: turns a `/v1/coaching` request into a validated correction (or a reasoned refusal);
- `routes`: the three HTTP routes and the `/v1/info` fields that advertise them;
- `reinjection`: the policy wrapper that answers `extra_keys.coaching` from the input alone;
- `export`: the `magma.export.gen` entry point that writes training datasets.

Nothing is imported here: `magma-gen export` loads `lava.coaching.export` in MAGMA's own
environment, where only pydantic and magma_core are guaranteed, and this package must not drag
the server's dependencies in on the way.
"""
