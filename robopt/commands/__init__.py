"""What the commands do, beside ``robopt.cli`` (which parses their arguments): collect demonstrations, pass@k,
and the other commands that load a run and build its parts.

The layer above the runner, the builder, the composition root and the features: a domain package (``robopt.data``,
``robopt.llm``, ``robopt.envs``) never imports the runner, the builder or the experiment table; a command does.
"""
